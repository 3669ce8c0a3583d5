# tools/gpu/device_check.sh's CPU dry run: every step of the GPU check (backend and model comparisons,
# train + SIGUSR1 + resume, benches) on build/ with the tiny model; fails when any step fails.
add_test(NAME gpu-device-check-dry-run
         COMMAND ${CMAKE_SOURCE_DIR}/tools/gpu/device_check.sh --dry-run --no-build)
set_tests_properties(gpu-device-check-dry-run PROPERTIES ENVIRONMENT "OUT=${CMAKE_BINARY_DIR}/gpu-check-dry-run;${RAYLESS_MPI_ENV}"
                     TIMEOUT 600 PROCESSORS 2 LABELS "mpi;e2e")
# tools/gpu/compare_trl.sh's CPU dry run: the GPU side-by-side with TRL on the tiny model (both tools,
# 4 steps; TRL from .venv-tools, else rayless alone and TRL's arguments), its results JSON and tables.
add_test(NAME gpu-compare-trl-dry-run COMMAND ${CMAKE_CURRENT_LIST_DIR}/compare_trl_dry_run.sh)
set_tests_properties(gpu-compare-trl-dry-run PROPERTIES ENVIRONMENT "OUT=${CMAKE_BINARY_DIR}/gpu-compare-dry-run;${RAYLESS_MPI_ENV}"
                     TIMEOUT 300 PROCESSORS 2 LABELS "mpi;e2e")
# tools/gpu/check_wheels.py: every requirement of the carried wheels met by a wheel or by the GPU machine
add_test(NAME gpu-check-wheels COMMAND ${CMAKE_CURRENT_LIST_DIR}/check_wheels.sh)
# tools/gpu/generation_bench.sh's CPU dry run: the GPU generation benchmark (issue 47) on the tiny model,
# its results JSON and table.
add_test(NAME gpu-generation-bench-dry-run COMMAND ${CMAKE_CURRENT_LIST_DIR}/generation_bench_dry_run.sh)
set_tests_properties(gpu-generation-bench-dry-run PROPERTIES ENVIRONMENT "OUT=${CMAKE_BINARY_DIR}/gpu-generation-dry-run"
                     TIMEOUT 300 LABELS e2e)
