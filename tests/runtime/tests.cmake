# End-to-end: the thread count a rank chooses from its CPU affinity (a real `rayless train`).
add_test(NAME runtime-threads-follow-affinity
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/threads_follow_affinity.sh $<TARGET_FILE:rayless>)
set_tests_properties(runtime-threads-follow-affinity PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300 LABELS e2e)
# The profiler's summaries against what the profiled runs did (rayless-bench generation --profile,
# rayless train --profile-step at 1 and 2 ranks, its one-line error)
add_test(NAME runtime-op-profile
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/op_profile.sh $<TARGET_FILE:rayless> $<TARGET_FILE:rayless-bench>)
set_tests_properties(runtime-op-profile PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300 LABELS "mpi;e2e"
                     PASS_REGULAR_EXPRESSION "PASS: profiles hold what the runs did")
