# comm: fault scenarios under mpiexec (a wrapper checks exit code and how often a message appears).
add_executable(comm-faults ${CMAKE_CURRENT_LIST_DIR}/programs/faults.cpp)
target_link_libraries(comm-faults PRIVATE rayless_comm)
rayless_use_pch(comm-faults)

function(rayless_comm_fault_test name np expected pattern times)
  add_test(NAME comm-fault-${name}-np${np}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/expect_exit.sh ${expected} ${pattern} ${times} --
                   ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:comm-faults> ${MPIEXEC_POSTFLAGS} ${ARGN})
  set_tests_properties(comm-fault-${name}-np${np} PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 60
                       PROCESSORS ${np} LABELS mpi)
endfunction()

# a rank that skips a collective: the others' watchdog (3 s) names it and aborts the job
rayless_comm_fault_test(stall 2 nonzero "collective allreduce stalled on rank 0 at step 7" 1 stall 3)
# (each waiting rank may report before the abort ends it: at least one report)
rayless_comm_fault_test(stall 3 nonzero "rayless: error: collective allreduce stalled on rank [02] at step 7" +1 stall 3)
# one rank throws while the others wait: after its 1 s grace it prints once and aborts (their
# watchdogs, at 10 s, must not be the ones that end the job)
rayless_comm_fault_test(throw-one 3 nonzero "rayless: error: rank 1: boom on rank 1" 1 throw-one 10 1)
rayless_comm_fault_test(throw-one 2 nonzero "rayless: error: .*boom" 1 throw-one 10 1)
rayless_comm_fault_test(throw-one-nostall 2 nonzero "stalled" 0 throw-one 10 1)
# an InputError every rank sees: a clean exit 2 everywhere, the message once
rayless_comm_fault_test(input-all 3 2 "rayless: error: config.toml: bad key everyone sees" 1 input-all 3)
rayless_comm_fault_test(ok 2 0 "rayless: error" 0 ok 3)
