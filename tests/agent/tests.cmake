# Tool workers' schemas against transformers' get_json_schema (golden: tools/make_agent_golden.py).
add_test(NAME "agent: tool schemas equal transformers' get_json_schema"
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/schemas_match_transformers.py)
set_tests_properties("agent: tool schemas equal transformers' get_json_schema" PROPERTIES TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "schemas ok")

if(TARGET rayless)
  # tools and environments through rayless train / inspect / h5py, and their one-line errors
  add_test(NAME agent-train COMMAND ${CMAKE_CURRENT_LIST_DIR}/agent_train.sh $<TARGET_FILE:rayless>)
  set_tests_properties(agent-train PROPERTIES TIMEOUT 300 LABELS e2e PASS_REGULAR_EXPRESSION "PASS: tools end to end")
  # a tool-calling generation read back in the middle of its cycle (num_iterations 2): the same weights
  # as without the interruption (the tool masks come back from the store); the turns of tools_calc replayed
  set(_agent_resume_sets
      --set model.path=tests/data/agent/model --set tokenizer.path= --set data.path=tests/data/trl-steps/tools_calc/prompts.jsonl
      --set data.prompt_field=text --set data.messages_field=prompt --set data.max_prompt_length=2048
      --set generation.max_completion_length=220 --set train.replay_rollouts=tests/data/trl-steps/tools_calc/rollouts.jsonl
      "--set=tools.calculator.command=\"python3 tools/agent_workers/rayless_agent.py tools tools/agent_workers/calculator.py\""
      "--set=reward.functions=[\"answer\", \"length\"]" --set reward.answer_mode=numeric --set reward.length_target=60
      --set train.max_steps=2 --set optim.lr_scheduler_type=constant --set optim.learning_rate=0.01)
  add_test(NAME agent-resume-mid-cycle
           COMMAND ${CMAKE_SOURCE_DIR}/tests/trainer/resume_exact.sh $<TARGET_FILE:rayless> $<TARGET_FILE:train-until-signal>
                   1 1 ${_agent_resume_sets})
  set_tests_properties(agent-resume-mid-cycle PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300 LABELS "mpi;e2e"
                       PASS_REGULAR_EXPRESSION "PASS: .*identical")
endif()
