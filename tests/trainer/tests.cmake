# End-to-end: real `rayless train` runs under mpirun on the embedded tiny model. train-until-signal
# is `rayless train` whose rank 0 raises SIGTERM after a given micro-step (the Trainer's hook).
set(trainer_env "${RAYLESS_MPI_ENV}")
add_executable(train-until-signal ${CMAKE_CURRENT_LIST_DIR}/programs/train_until_signal.cpp)
target_link_libraries(train-until-signal PRIVATE rayless_core)
target_include_directories(train-until-signal PRIVATE ${CMAKE_SOURCE_DIR}/src)
rayless_use_pch(train-until-signal)
add_test(NAME trainer-resume-mid-cycle-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume_exact.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal> 2 2)
add_test(NAME trainer-resume-mid-accumulation-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume_exact.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal> 2 3
                 --set train.gradient_accumulation_steps=2 --set grpo.num_iterations=1 --set grpo.steps_per_generation=2)
add_test(NAME trainer-old-logprob-passes COMMAND ${CMAKE_CURRENT_LIST_DIR}/old_logprob_passes.sh $<TARGET_FILE:rayless>)
add_test(NAME trainer-old-logprob-passes-bf16 COMMAND ${CMAKE_CURRENT_LIST_DIR}/old_logprob_passes.sh $<TARGET_FILE:rayless> bf16)
add_test(NAME trainer-padding-free-same-metrics COMMAND ${CMAKE_CURRENT_LIST_DIR}/padding_free_same_metrics.sh $<TARGET_FILE:rayless>)
add_test(NAME trainer-gradient-checkpointing-same-metrics
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/gradient_checkpointing_same_metrics.sh $<TARGET_FILE:rayless>)
add_test(NAME trainer-gradient-checkpointing-same-metrics-bf16
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/gradient_checkpointing_same_metrics.sh $<TARGET_FILE:rayless> bf16)
add_test(NAME trainer-bad-config-all-ranks-exit2
         COMMAND sh -c "mpirun -np 2 --oversubscribe $<TARGET_FILE:rayless> train --config ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set grpo.loss_type=ppo > out.txt 2>&1; rc=$?; cat out.txt; [ $rc -eq 2 ] && [ $(grep -c 'rayless: error:' out.txt) -eq 1 ]")
set_tests_properties(trainer-resume-mid-cycle-np2 trainer-resume-mid-accumulation-np2 trainer-old-logprob-passes trainer-old-logprob-passes-bf16
                     trainer-padding-free-same-metrics trainer-gradient-checkpointing-same-metrics
                     trainer-gradient-checkpointing-same-metrics-bf16
                     trainer-bad-config-all-ranks-exit2
                     PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2 LABELS "mpi;e2e"
                                WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME trainer-entropy-quantile-keeps-top-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/entropy_quantile_keeps_top.sh $<TARGET_FILE:rayless>)
set_tests_properties(trainer-entropy-quantile-keeps-top-np2 PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600
                     PROCESSORS 2 LABELS "mpi;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME trainer-groups-span-ranks-np2 COMMAND ${CMAKE_CURRENT_LIST_DIR}/groups_span_ranks.sh $<TARGET_FILE:rayless>)
set_tests_properties(trainer-groups-span-ranks-np2 PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2
                     LABELS "mpi;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME trainer-sampling-per-row-np2 COMMAND ${CMAKE_CURRENT_LIST_DIR}/sampling_per_row.sh $<TARGET_FILE:rayless>)
set_tests_properties(trainer-sampling-per-row-np2 PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2
                     LABELS "mpi;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
add_test(NAME trainer-world-size-and-store COMMAND ${CMAKE_CURRENT_LIST_DIR}/world_size_and_store.sh $<TARGET_FILE:rayless>
         $<TARGET_FILE:train-until-signal>)
set_tests_properties(trainer-world-size-and-store PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2
                     LABELS "mpi;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

# Batch-job semantics (fail before training, SIGTERM that checkpoints, one run per directory, an index
# that follows world-size changes, small gaps, the data order and the config across resumes, guard
# rails before memory) and what TRL users reach for (named rewards, reward models, eval, TensorBoard,
# sample tables, conversational rows)
foreach(_script bad_data_fails_at_start sigterm_checkpoints run_directory_never_mixes world_size_changes_index small_gaps
                grpo_user_features chat_prompt_ids data_order_world_sizes resume_config_changes guard_rails nonfinite_guard
                dataset_index)
  string(REPLACE "_" "-" _name ${_script})
  add_test(NAME trainer-${_name}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/${_script}.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal>)
  set_tests_properties(trainer-${_name} PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2
                       LABELS "mpi;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endforeach()

# Asynchronous GRPO (distributed.generation_ranks, docs/distributed.md): lag 0 equals a synchronous run,
# the policy version of every stored generation, exact resume after SIGUSR1 and SIGKILL at lag 1 and 2,
# bad settings, a stalled generation rank
foreach(_scenario "equals-sync" "versions 1 1" "versions 2 2" "resume 1" "resume 2" "bad-settings" "stalled-generator")
  string(REPLACE " " "-" _name "${_scenario}")
  separate_arguments(_args UNIX_COMMAND "${_scenario}")
  add_test(NAME trainer-async-${_name} COMMAND ${CMAKE_CURRENT_LIST_DIR}/async_grpo.sh $<TARGET_FILE:rayless> ${_args})
  set_tests_properties(trainer-async-${_name} PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600 PROCESSORS 2
                       LABELS "mpi;e2e;async" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endforeach()

# Whole-step parity with TRL (label "parity"): every case under tests/data/trl-steps/ (written by
# tools/make_trl_step_reference.py) is replayed through `rayless train` and compared, weights after
# each optimizer step and every metric TRL logged. A new case directory is picked up at configure time.
file(GLOB _parity_cases CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/data/trl-steps/*/case.json)
foreach(_case_json ${_parity_cases})
  get_filename_component(_case_dir ${_case_json} DIRECTORY)
  get_filename_component(_case ${_case_dir} NAME)
  file(READ ${_case_json} _case_text)
  string(JSON _processes ERROR_VARIABLE _no_processes GET "${_case_text}" num_processes)
  if(_no_processes)
    set(_processes 1)
  endif()
  # padded: TRL's layout, 1e-9; packed: rayless's default layout (train.padding_free), see parity_trl.py
  foreach(_layout padded packed)
    add_test(NAME parity-${_case}-${_layout}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/parity_trl.py --rayless $<TARGET_FILE:rayless>
                     --case ${_case_dir} --layout ${_layout})
    set_tests_properties(parity-${_case}-${_layout} PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600
                         PROCESSORS ${_processes} LABELS "parity;e2e" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endforeach()
endforeach()

# ZeRO stages (distributed.zero_stage): the same weights at every stage and np 1..4, checkpoints that
# move between stages and world sizes, exact resume between optimizer steps at stage 2
foreach(_np 1 2 3 4)
  add_test(NAME trainer-zero-stages-same-weights-np${_np}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/zero_stages_same_weights.sh $<TARGET_FILE:rayless> ${_np})
  set_tests_properties(trainer-zero-stages-same-weights-np${_np} PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600
                       PROCESSORS 2 LABELS "mpi;e2e;zero" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endforeach()
add_test(NAME trainer-zero-resume-world-sizes
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/zero_resume_world_sizes.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal>)
add_test(NAME trainer-zero2-resume-mid-accumulation-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume_exact.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal> 2 3
                 --set train.gradient_accumulation_steps=2 --set grpo.num_iterations=1 --set grpo.steps_per_generation=2
                 --set distributed.zero_stage=2)
add_test(NAME trainer-zero2-resume-mid-cycle-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/resume_exact.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal> 2 2
                 --set distributed.zero_stage=2)
set_tests_properties(trainer-zero-resume-world-sizes trainer-zero2-resume-mid-accumulation-np2
                     trainer-zero2-resume-mid-cycle-np2 PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600
                     PROCESSORS 2 LABELS "mpi;e2e;zero" WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

# LoRA: PEFT's files, the reference as the base with adapters off, ZeRO, exact resume, bad settings;
# and the round trip through PEFT itself (skipped without .venv-tools, tools/setup_tools_venv.sh)
add_test(NAME trainer-lora-np2
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/lora_train.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal>)
add_test(NAME trainer-lora-peft-roundtrip
         COMMAND sh -c "py=${CMAKE_SOURCE_DIR}/.venv-tools/bin/python; [ -x $py ] || { echo 'SKIP: no .venv-tools'; exit 77; }; \
exec $py ${CMAKE_CURRENT_LIST_DIR}/lora_peft_roundtrip.py $<TARGET_FILE:rayless> $<TARGET_FILE:rayless-bench>")
set_tests_properties(trainer-lora-np2 trainer-lora-peft-roundtrip PROPERTIES ENVIRONMENT "${trainer_env}" TIMEOUT 600
                     PROCESSORS 2 LABELS "mpi;e2e;lora" SKIP_RETURN_CODE 77 WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})

# one read from the device per optimizer step (issue 48 §3): no function of the step reads a device
# value but StepRead::values(), once (the in-process count: trainer-mpi's "one read to the host")
add_test(NAME trainer-step-reads-once COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/step_reads_once.py ${CMAKE_SOURCE_DIR})
