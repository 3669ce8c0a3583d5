# End-to-end: the thread count a rank chooses from its CPU affinity (a real `rayless train`).
add_test(NAME runtime-threads-follow-affinity
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/threads_follow_affinity.sh $<TARGET_FILE:rayless>)
set_tests_properties(runtime-threads-follow-affinity PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300 LABELS e2e)
