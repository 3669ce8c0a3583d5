# `rayless-bench init-model` (tools/bench): seeded, reproducible HF directories.
add_test(NAME bench-init-model COMMAND ${CMAKE_CURRENT_LIST_DIR}/init_model.sh $<TARGET_FILE:rayless-bench>)
set_tests_properties(bench-init-model PROPERTIES TIMEOUT 120 LABELS e2e)
