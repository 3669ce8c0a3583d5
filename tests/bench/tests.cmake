# `rayless-bench init-model` (tools/bench): seeded, reproducible HF directories.
add_test(NAME bench-init-model COMMAND ${CMAKE_CURRENT_LIST_DIR}/init_model.sh $<TARGET_FILE:rayless-bench>)
set_tests_properties(bench-init-model PROPERTIES TIMEOUT 120 LABELS e2e)
# The benchmark harness (tools/bench/compare.py): its settings table, checked without running TRL.
add_test(NAME bench-compare-equal-settings COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_equal_settings.sh)
# the `rayless version` fields it records, one per line
add_test(NAME bench-compare-versions COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_versions.sh $<TARGET_FILE:rayless>)
set_tests_properties(bench-compare-versions PROPERTIES WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# its machine floor (the lower bound set against TRL's step / 3), against hand-computed cases
add_test(NAME bench-compare-machine-floor COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_floor.sh)
# its targets table (speed, memory, 2 ranks by step time and by completion tok/s), against hand-computed cases
add_test(NAME bench-compare-targets COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_targets.sh)
# its GPU report (TRL / rayless-1 step time, peak GPU memory, unfinished runs), against hand-computed cases
add_test(NAME bench-compare-gpu-targets COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_gpu_targets.sh)
# its time limit on a run: stopped with what it started, reported as unfinished
add_test(NAME bench-compare-deadline COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_deadline.sh)
set_tests_properties(bench-compare-deadline PROPERTIES TIMEOUT 60)
# `rayless-bench decode` runs and prints its table (a smoke check; the figures are for docs/benchmarks.md)
add_test(NAME bench-decode-prints-limits
         COMMAND $<TARGET_FILE:rayless-bench> decode --config-json ${CMAKE_SOURCE_DIR}/configs/models/tiny/config.json
                 --rows 1,4 --steps 3)
set_tests_properties(bench-decode-prints-limits PROPERTIES TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "decode floor.*\\| 4 \\| [0-9.]+ \\| [0-9.]+ \\|")
# `rayless-bench products` times each product on the kernel GenerationLinear picks (a smoke check)
add_test(NAME bench-products-prints-kernels
         COMMAND $<TARGET_FILE:rayless-bench> products --config-json ${CMAKE_SOURCE_DIR}/configs/models/tiny/config.json
                 --rows 1,4 --pool-mb 4 --bf16)
set_tests_properties(bench-products-prints-kernels PROPERTIES TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "\\| down \\| \\[256, 704\\] \\| [A-Za-z0-9_]+ \\| 4 \\| [0-9.]+ \\|")
# bad input: a backend table that is neither the CPU's nor the CUDA backend's
add_test(NAME bench-generation-bad-table-exit2 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/expect_one_line_exit2.sh
         "bench generation: --cpu-runs-table must be cpu or cuda" $<TARGET_FILE:rayless-bench> generation
         --cpu-runs-table gpu)
add_test(NAME bench-products-bad-rows-exit2 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/expect_one_line_exit2.sh
         "bench products: --rows must list positive integers" $<TARGET_FILE:rayless-bench> products
         --config-json ${CMAKE_SOURCE_DIR}/configs/models/tiny/config.json --rows 0)
# bad input: a --rows list that is not positive integers, a config.json that is not JSON: one line, exit 2
add_test(NAME bench-decode-bad-rows-exit2 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/expect_one_line_exit2.sh
         "--rows must list positive integers" $<TARGET_FILE:rayless-bench> decode
         --config-json ${CMAKE_SOURCE_DIR}/configs/models/tiny/config.json --rows 1,x)
add_test(NAME bench-decode-bad-json-exit2 COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/expect_one_line_exit2.sh
         "not valid JSON" $<TARGET_FILE:rayless-bench> decode --config-json ${CMAKE_SOURCE_DIR}/configs/demo.toml)
# the profiling library (tools/profile/op_times.cpp) preloaded into a generation prints its operators at exit
add_test(NAME bench-op-times-profiles-generate COMMAND sh -c "\
  OP_TIMES_AT_EXIT=1 LD_PRELOAD=$<TARGET_FILE:rayless-op-times> $<TARGET_FILE:rayless> generate \
    --model ${CMAKE_SOURCE_DIR}/configs/models/tiny --prompt hi --max-new-tokens 4 --greedy 2>op_times.txt >/dev/null && \
  cat op_times.txt && grep -q '^=== window [0-9.]* s, top-level calls [0-9.]* s$' op_times.txt && \
  grep -q ' ms .*aten::linear x[0-9]' op_times.txt")
set_tests_properties(bench-op-times-profiles-generate PROPERTIES TIMEOUT 120 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
