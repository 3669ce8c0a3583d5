# The TRL reference cases: single process, then under mpirun (distributed entropy thresholds).
if(TARGET rayless-refcheck)
  add_test(NAME grpo-refcheck COMMAND rayless-refcheck ${RAYLESS_TEST_DATA}/trl-reference)
  set_tests_properties(grpo-refcheck PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300)
  rayless_add_mpi_test(grpo-refcheck-np3 rayless-refcheck 3 ARGS ${RAYLESS_TEST_DATA}/trl-reference TIMEOUT 300)
endif()

# the large entropy threshold case once at np 2
rayless_add_mpi_test(grpo-mpi-threshold-16M-np2 test-grpo-mpi 2 ARGS "[big]" TIMEOUT 300)
