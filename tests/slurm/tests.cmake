# Launch tests: the private single-node Slurm (tools/slurm/start.sh, started by tools/test.sh, which
# sets RAYLESS_SLURM_UP=1), the sbatch scripts in slurm/, the mpirun launcher in jobs/ and the reward
# plot. Slurm tests exit 77 (skipped) without RAYLESS_SLURM_UP, and take one lock so their 2-task
# jobs do not queue behind each other past their timeouts.

# the smallest MPI program: proves srun --mpi=pmix wires ranks into one world
add_executable(slurm-mpi-hello ${CMAKE_CURRENT_LIST_DIR}/mpi_hello.c)
target_link_libraries(slurm-mpi-hello PRIVATE MPI::MPI_C)

set(RAYLESS_SLURM_TOOLS ${CMAKE_SOURCE_DIR}/tools/slurm)
set(RAYLESS_SLURM_WORK ${CMAKE_BINARY_DIR}/slurm-tests)

function(rayless_add_slurm_test name timeout)
  add_test(NAME "slurm: ${name}" COMMAND ${ARGN})
  set_tests_properties("slurm: ${name}" PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK rayless_slurm
                       TIMEOUT ${timeout} PROCESSORS 2 LABELS slurm)
endfunction()

rayless_add_slurm_test("sbatch MPI hello" 180
  ${RAYLESS_SLURM_TOOLS}/test_hello.sh $<TARGET_FILE:slurm-mpi-hello> ${RAYLESS_SLURM_WORK}/hello)
rayless_add_slurm_test("cpu.sbatch plumbing (fake trainer)" 180
  ${RAYLESS_SLURM_TOOLS}/test_train.sh $<TARGET_FILE:rayless> ${RAYLESS_SLURM_WORK}/train-fake --fake)
rayless_add_slurm_test("preemption requeue mechanics (fake trainer)" 400
  ${RAYLESS_SLURM_TOOLS}/test_preempt.sh $<TARGET_FILE:rayless> ${RAYLESS_SLURM_WORK}/preempt-fake --fake)
rayless_add_slurm_test("sweep.sbatch array (fake trainer)" 180
  ${RAYLESS_SLURM_TOOLS}/test_sweep.sh ${RAYLESS_SLURM_WORK}/sweep)
rayless_add_slurm_test("cpu.sbatch trains 3 steps" 600
  ${RAYLESS_SLURM_TOOLS}/test_train.sh $<TARGET_FILE:rayless> ${RAYLESS_SLURM_WORK}/train)
rayless_add_slurm_test("preempted run resumes to the same model" 900
  ${RAYLESS_SLURM_TOOLS}/test_preempt.sh $<TARGET_FILE:rayless> ${RAYLESS_SLURM_WORK}/preempt)
rayless_add_slurm_test("time limit: --time=2 --signal=B:USR1@60 requeues (fake trainer)" 400
  ${RAYLESS_SLURM_TOOLS}/test_timelimit.sh $<TARGET_FILE:rayless> ${RAYLESS_SLURM_WORK}/timelimit-fake --fake)
rayless_add_slurm_test("SIGTERM checkpoints (ranks and batch shell)" 900
  ${RAYLESS_SLURM_TOOLS}/test_signals.sh $<TARGET_FILE:rayless> ${RAYLESS_SLURM_WORK}/signals)

# docs/hpc.md's signal table: every row names the tests that check it (through tools/signal_table.sh)
# and every check names a row. No Slurm needed: it reads the table, ctest's list and the scripts.
add_test(NAME signal-table-rows-have-tests
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/signal_table_tests.py ${CMAKE_CTEST_COMMAND}
                 ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(signal-table-rows-have-tests PROPERTIES TIMEOUT 60)

# no Slurm needed: the workstation launcher (fake trainer under mpirun) and the reward plot
add_test(NAME "slurm: jobs/train-local.sh launches ranks (fake trainer)"
         COMMAND ${RAYLESS_SLURM_TOOLS}/test_train_local.sh ${RAYLESS_SLURM_WORK}/train-local)
set_tests_properties("slurm: jobs/train-local.sh launches ranks (fake trainer)" PROPERTIES
                     TIMEOUT 120 PROCESSORS 2 LABELS mpi)
add_test(NAME "slurm: plot_reward.sh draws metrics.jsonl"
         COMMAND ${RAYLESS_SLURM_TOOLS}/test_plot_reward.sh ${RAYLESS_SLURM_WORK}/plot)
set_tests_properties("slurm: plot_reward.sh draws metrics.jsonl" PROPERTIES TIMEOUT 60)

# The two-node cluster (tools/slurm/start_multinode.sh: a network and UTS namespace per node, one
# slurmd each), label multinode: training across nodes equals a single-node run, preemption and
# requeue across nodes, Slurm's own time-limit warning (--time=2 --signal=B:USR1@60) with requeue, an array job, asynchronous GRPO with the generation ranks on the second node, a node lost mid-run (named, then resumed exactly). Skipped (77) when tools/test.sh did not start it.
foreach(_what train preempt timelimit sweep async nodelost)
  add_test(NAME "multinode: ${_what}" COMMAND ${RAYLESS_SLURM_TOOLS}/test_multinode.sh ${_what} $<TARGET_FILE:rayless>
           ${RAYLESS_SLURM_WORK}/multinode-${_what})
  set_tests_properties("multinode: ${_what}" PROPERTIES SKIP_RETURN_CODE 77 RESOURCE_LOCK rayless_slurm_multinode
                       TIMEOUT 900 PROCESSORS 2 LABELS multinode)
endforeach()
