# Faults during training (issue 17 §3; docs/reliability.md): kill -9 at random moments and inside
# checkpoint and rollout-store writes, a stalled rank, a dead rank, a full disk. Real `rayless train`
# jobs under mpirun on the embedded tiny model (configs/ci-small.toml). Writes are broken by
# io_faults, an LD_PRELOAD shim the tests set on the ranks (test-only variables: rayless reads none).
add_library(rayless_io_faults MODULE ${CMAKE_CURRENT_LIST_DIR}/io_faults.c)
target_link_libraries(rayless_io_faults PRIVATE ${CMAKE_DL_LIBS})
set_target_properties(rayless_io_faults PROPERTIES PREFIX "lib" OUTPUT_NAME io_faults)

set(_faults ${CMAKE_CURRENT_LIST_DIR})
set(_faults_reference ${CMAKE_CURRENT_BINARY_DIR}/faults-reference)
set(_faults_shim $<TARGET_FILE:rayless_io_faults>)

# the uninterrupted run the others compare with, once per ctest run
add_test(NAME faults-reference-run COMMAND ${_faults}/reference_run.sh $<TARGET_FILE:rayless> ${_faults_reference})
set_tests_properties(faults-reference-run PROPERTIES FIXTURES_SETUP faults_reference)

add_test(NAME faults-kill9-inside-writes
         COMMAND ${_faults}/kill_in_write.sh $<TARGET_FILE:rayless> ${_faults_shim} ${_faults_reference})
add_test(NAME faults-kill9-before-first-checkpoint
         COMMAND ${_faults}/kill_before_first_checkpoint.sh $<TARGET_FILE:rayless> ${_faults_shim} ${_faults_reference})
add_test(NAME faults-disk-full
         COMMAND ${_faults}/disk_full.sh $<TARGET_FILE:rayless> ${_faults_shim} ${_faults_reference})
set_tests_properties(faults-kill9-inside-writes faults-kill9-before-first-checkpoint faults-disk-full
                     PROPERTIES FIXTURES_REQUIRED faults_reference)

# 32 steps (its own uninterrupted run), 5 kills of the whole job at delays from a seeded RNG (seed 17)
add_test(NAME faults-kill9-random-moments COMMAND ${_faults}/kill_random.sh $<TARGET_FILE:rayless> 32 17 5)

# np 3: one rank stopped (SIGSTOP) or killed (SIGKILL) after step 1, collective_timeout_s = 10
add_test(NAME faults-stalled-rank-np3 COMMAND ${_faults}/rank_fault.sh $<TARGET_FILE:rayless> stop 10 10)
add_test(NAME faults-dead-rank-np3 COMMAND ${_faults}/rank_fault.sh $<TARGET_FILE:rayless> kill 10 10)
# rank 1 calls through a null function pointer: one report that names the caller, the job ends
add_test(NAME faults-crash-report COMMAND ${_faults}/crash_report.sh $<TARGET_FILE:rayless> ${_faults_shim})

set_tests_properties(faults-reference-run faults-kill9-random-moments faults-kill9-inside-writes
                     faults-kill9-before-first-checkpoint faults-disk-full faults-stalled-rank-np3 faults-dead-rank-np3
                     faults-crash-report PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300 PROCESSORS 2 LABELS faults)

# damaged newest checkpoint (fallback with a warning, or exit 2 for --resume PATH) and damaged stored
# generations at a mid-cycle resume (exit 2 naming the step file)
add_test(NAME faults-corrupt-files COMMAND ${_faults}/corrupt_files.sh $<TARGET_FILE:rayless> ${_faults_reference})
set_tests_properties(faults-corrupt-files PROPERTIES FIXTURES_REQUIRED faults_reference ENVIRONMENT "${RAYLESS_MPI_ENV}"
                     TIMEOUT 300 PROCESSORS 2 LABELS faults)
