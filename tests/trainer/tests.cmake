# End-to-end: real `rayless train` runs under mpirun on the embedded tiny model.
set(trainer_env "${RAYLESS_MPI_ENV}")
add_test(NAME trainer-resume-mid-cycle-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume_exact.sh $<TARGET_FILE:rayless> 2 2)
add_test(NAME trainer-resume-mid-accumulation-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume_exact.sh $<TARGET_FILE:rayless> 2 3
                 --set train.gradient_accumulation_steps=2 --set grpo.num_iterations=1 --set grpo.steps_per_generation=2)
add_test(NAME trainer-old-logprob-passes COMMAND ${CMAKE_CURRENT_LIST_DIR}/old_logprob_passes.sh $<TARGET_FILE:rayless>)
add_test(NAME trainer-padding-free-same-metrics COMMAND ${CMAKE_CURRENT_LIST_DIR}/padding_free_same_metrics.sh $<TARGET_FILE:rayless>)
add_test(NAME trainer-bad-config-all-ranks-exit2
         COMMAND sh -c "mpirun -np 2 --oversubscribe $<TARGET_FILE:rayless> train --config ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set grpo.loss_type=ppo > out.txt 2>&1; rc=$?; cat out.txt; [ $rc -eq 2 ] && [ $(grep -c 'rayless: error:' out.txt) -eq 1 ]")
set_tests_properties(trainer-resume-mid-cycle-np2 trainer-resume-mid-accumulation-np2 trainer-old-logprob-passes
                     trainer-padding-free-same-metrics
                     trainer-bad-config-all-ranks-exit2
                     PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2 LABELS "mpi;e2e"
                                WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME trainer-world-size-and-store COMMAND ${CMAKE_CURRENT_LIST_DIR}/world_size_and_store.sh $<TARGET_FILE:rayless>)
set_tests_properties(trainer-world-size-and-store PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2
                     LABELS "mpi;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
