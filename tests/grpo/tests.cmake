# the completion log-prob passes load the golden model directories (hf)
target_link_libraries(test-grpo PRIVATE rayless_hf)
# The TRL reference cases: single process, then under mpirun (distributed entropy thresholds).
if(TARGET rayless-refcheck)
  add_test(NAME grpo-refcheck COMMAND rayless-refcheck ${RAYLESS_TEST_DATA}/trl-reference)
  set_tests_properties(grpo-refcheck PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300)
  # --device: the same cases with every input on a LibTorch device (CUDA in tools/gpu/device_check.sh);
  # a name that is no device, or CUDA where there is none, is an input error (exit 2) before any case
  add_test(NAME grpo-refcheck-device-cpu COMMAND rayless-refcheck --device cpu ${RAYLESS_TEST_DATA}/trl-reference)
  add_test(NAME grpo-refcheck-bad-device
           COMMAND bash -c "$0 --device gpu0 $1; test $? = 2 || exit 1; $0 --device cuda:7 $1 2>&1 | grep -q 'no CUDA device' || [ -n \"$(nvidia-smi -L 2>/dev/null)\" ]"
                   $<TARGET_FILE:rayless-refcheck> ${RAYLESS_TEST_DATA}/trl-reference)
  set_tests_properties(grpo-refcheck-device-cpu grpo-refcheck-bad-device PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300)
  rayless_add_mpi_test(grpo-refcheck-np3 rayless-refcheck 3 ARGS ${RAYLESS_TEST_DATA}/trl-reference TIMEOUT 300)
endif()

# the large entropy threshold case once at np 2
rayless_add_mpi_test(grpo-mpi-threshold-16M-np2 test-grpo-mpi 2 ARGS "[big]" TIMEOUT 300)
