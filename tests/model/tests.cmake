# CLI checks of rayless generate on the embedded tiny model (no download, no weights file).
add_test(NAME "model: rayless generate tiny --greedy --json"
         COMMAND $<TARGET_FILE:rayless> generate --model ${CMAKE_SOURCE_DIR}/configs/models/tiny --prompt hi
                 --max-new-tokens 8 --greedy --json)
set_tests_properties("model: rayless generate tiny --greedy --json" PROPERTIES
                     PASS_REGULAR_EXPRESSION "\"completion_ids\":\\[[0-9]+(,[0-9]+)*\\].*\"prompt_ids\":\\[104,105\\]" TIMEOUT 120)
# a directory that is not a model: exit 2 with one line naming it
add_test(NAME "model: rayless generate on a non-model directory exits 2"
         COMMAND sh -c "$<TARGET_FILE:rayless> generate --model ${CMAKE_SOURCE_DIR}/docs --prompt hi 2>&1; test $? -eq 2")
set_tests_properties("model: rayless generate on a non-model directory exits 2" PROPERTIES
                     PASS_REGULAR_EXPRESSION "rayless: error: .*docs: not a model directory" TIMEOUT 60)
# the RoPE / sliding-window golden tests compare greedy generate() with transformers' generate
target_link_libraries(test-model PRIVATE rayless_sampler rayless_hf rayless_grpo)
