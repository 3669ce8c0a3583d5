# Tool workers' schemas against transformers' get_json_schema (golden: tools/make_agent_golden.py).
add_test(NAME "agent: tool schemas equal transformers' get_json_schema"
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/schemas_match_transformers.py)
set_tests_properties("agent: tool schemas equal transformers' get_json_schema" PROPERTIES TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "schemas ok")
