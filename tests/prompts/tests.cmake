# rayless tokenize against transformers' apply_chat_template / tokenizer(text): text and ids, and the
# one-line errors (fixtures: tools/make_tokenize_golden.py).
if(TARGET rayless)
  add_test(NAME "prompts: rayless tokenize equals transformers (tests/data/chat-models)"
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/tokenize_matches_transformers.py
                   $<TARGET_FILE:rayless> ${RAYLESS_TEST_DATA}/chat-models)
  set_tests_properties("prompts: rayless tokenize equals transformers (tests/data/chat-models)" PROPERTIES
                       TIMEOUT 120)
  # the tokenizer class transformers loads per family and tokenizer_class, and its pipeline
  # (fixtures: tools/make_tokenizer_class_golden.py)
  add_test(NAME "prompts: rayless tokenize equals transformers' tokenizer classes (tests/data/tokenizer-classes)"
           COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/tokenize_matches_transformers.py
                   $<TARGET_FILE:rayless> ${RAYLESS_TEST_DATA}/tokenizer-classes)
  set_tests_properties("prompts: rayless tokenize equals transformers' tokenizer classes (tests/data/tokenizer-classes)"
                       PROPERTIES TIMEOUT 300 PROCESSORS 2)
endif()
