# The kernels' end-to-end checks run them inside the decoder (a cached decode of the tiny model against
# its full forward), and the length-bucket checks build the decoder's attention masks.
target_link_libraries(test-ops PRIVATE rayless_model)
# the plan's test drives `rayless version`
add_dependencies(test-ops rayless)
# `rayless version`'s plan answers to the kernel switches; bad switches are exit 2; a switch reaches its kernel
add_test(NAME ops-kernel-switches COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/kernel_switches.sh $<TARGET_FILE:rayless>)
set_tests_properties(ops-kernel-switches PROPERTIES TIMEOUT 180 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
