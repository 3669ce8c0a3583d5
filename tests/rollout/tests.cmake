# Tests that cross into Python or the CLI (included by tests/CMakeLists.txt with module = rollout).
set(_rollout_fixture ${CMAKE_BINARY_DIR}/test-scratch/rollout-python-fixture)
# The C++ store writes a 2-rank store; Debian's h5py reads it back through index.h5 and checks values.
add_test(NAME "rollout: h5py reads the store (tools/read_rollouts.py)"
         COMMAND sh -c "RAYLESS_FIXTURE_DIR='${_rollout_fixture}' '$<TARGET_FILE:test-rollout>' '[.python-fixture]' \
&& /usr/bin/python3 '${CMAKE_SOURCE_DIR}/tools/read_rollouts.py' '${_rollout_fixture}/index.h5' --check-fixture \
&& /usr/bin/python3 '${CMAKE_SOURCE_DIR}/tools/read_rollouts.py' '${_rollout_fixture}/rank-00001.h5' --show 1")
set_tests_properties("rollout: h5py reads the store (tools/read_rollouts.py)" PROPERTIES TIMEOUT 120
                     RESOURCE_LOCK rollout-python-fixture PASS_REGULAR_EXPRESSION "fixture ok")

# rayless inspect: the summary, --show, exports and the one-line error on a missing or corrupt file.
if(TARGET rayless)
  set(_inspect_script ${CMAKE_CURRENT_LIST_DIR}/inspect_cli.sh)
  add_test(NAME "rollout: rayless inspect (summary, show, export, errors)"
           COMMAND sh ${_inspect_script} $<TARGET_FILE:rayless> $<TARGET_FILE:test-rollout> ${_rollout_fixture}-inspect)
  set_tests_properties("rollout: rayless inspect (summary, show, export, errors)" PROPERTIES TIMEOUT 120)
endif()
