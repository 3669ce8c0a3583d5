# The CLI's own promises about configs: exit codes and one-line messages.
set(cfg_dir ${CMAKE_CURRENT_BINARY_DIR}/cli-configs)
file(MAKE_DIRECTORY ${cfg_dir})
file(WRITE ${cfg_dir}/typo.toml "[grpo]\nnum_generation = 4\n")
file(WRITE ${cfg_dir}/type.toml "[train]\nmax_steps = 2.5\n")
add_test(NAME cli-config-typo-exit2 COMMAND sh -c "$<TARGET_FILE:rayless> config check ${cfg_dir}/typo.toml 2>err.txt; rc=$?; cat err.txt; [ $rc -eq 2 ] && [ $(wc -l < err.txt) -eq 1 ] && grep -q 'rayless: error: .*typo.toml:2: unknown key grpo.num_generation (did you mean grpo.num_generations?)' err.txt")
add_test(NAME cli-config-type-exit2 COMMAND sh -c "$<TARGET_FILE:rayless> config check ${cfg_dir}/type.toml 2>err2.txt; rc=$?; cat err2.txt; [ $rc -eq 2 ] && grep -q 'train.max_steps = 2.5 (a float) is not allowed: expected an integer >= 1' err2.txt")
# the options added for the packed log-prob pass and the gradient buckets refuse bad values the same way
file(WRITE ${cfg_dir}/padding_free.toml "[train]\npadding_free = \"yes\"\n")
add_test(NAME cli-config-new-options-exit2 COMMAND sh -c "\
  $<TARGET_FILE:rayless> config check ${cfg_dir}/padding_free.toml 2>e1.txt; r1=$?; \
  $<TARGET_FILE:rayless> config check ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set distributed.bucket_size_mb=-1 2>e2.txt; r2=$?; \
  cat e1.txt e2.txt; [ $r1 -eq 2 ] && [ $r2 -eq 2 ] && [ $(wc -l < e1.txt) -eq 1 ] && [ $(wc -l < e2.txt) -eq 1 ] && \
  grep -q 'padding_free.toml:2: key train.padding_free = .yes. (a string) is not allowed: expected true or false' e1.txt && \
  grep -q 'distributed.bucket_size_mb = -1 (an integer) is not allowed: expected an integer >= 0' e2.txt")
# ZeRO stage 3 (sharded parameters) is not implemented: refused before anything starts
add_test(NAME cli-config-zero-stage-exit2 COMMAND sh -c "\
  $<TARGET_FILE:rayless> train --config ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set distributed.zero_stage=3 --output zero3-run 2>e3.txt; r3=$?; \
  cat e3.txt; [ $r3 -eq 2 ] && [ $(wc -l < e3.txt) -eq 1 ] && [ ! -e zero3-run ] && \
  grep -q 'distributed.zero_stage = 3 (an integer) is not allowed: expected an integer in .0, 2.' e3.txt")
# LoRA's own cross-field rules
add_test(NAME cli-config-lora-rules-exit2 COMMAND sh -c "\
  $<TARGET_FILE:rayless> config check ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set lora.enabled=true --set grpo.beta=0.1 --set grpo.sync_ref_model=true 2>l1.txt; r1=$?; \
  $<TARGET_FILE:rayless> config check ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set lora.enabled=true --set lora.dropout=0.1 --set train.gradient_checkpointing=true 2>l2.txt; r2=$?; \
  cat l1.txt l2.txt; [ $r1 -eq 2 ] && [ $r2 -eq 2 ] && [ $(wc -l < l1.txt) -eq 1 ] && [ $(wc -l < l2.txt) -eq 1 ] && \
  grep -q 'grpo.sync_ref_model = true cannot be used with lora.enabled = true' l1.txt && \
  grep -q 'lora.dropout = 0.1 cannot be used with train.gradient_checkpointing = true' l2.txt")
# the shipped configs that run as they are pass (example-full.toml's model and data are downloaded
# first: config_paths_from_anywhere.sh checks that config check names them)
add_test(NAME cli-config-check-shipped COMMAND sh -c "for f in ${CMAKE_SOURCE_DIR}/configs/*.toml; do \
  case $f in */example-full.toml) continue ;; esac; $<TARGET_FILE:rayless> config check $f || exit 1; done")
# relative paths in a config are relative to its directory: config check and train from elsewhere
add_test(NAME cli-config-paths-from-anywhere
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/config_paths_from_anywhere.sh $<TARGET_FILE:rayless>)
set_tests_properties(cli-config-paths-from-anywhere PROPERTIES ENVIRONMENT "${RAYLESS_MPI_ENV}" TIMEOUT 300 LABELS e2e)
add_test(NAME cli-version COMMAND sh -c "$<TARGET_FILE:rayless> version | grep -q '^libtorch 2\\.' && $<TARGET_FILE:rayless> version | grep -q '^mpi ' && $<TARGET_FILE:rayless> version | grep -q '^hdf5 1\\.'")
add_test(NAME cli-unknown-command-exit2 COMMAND sh -c "$<TARGET_FILE:rayless> frobnicate 2>&1; [ $? -eq 2 ]")
add_test(NAME cli-docs-match-code COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/docs_match_code.py $<TARGET_FILE:rayless>
         ${CMAKE_SOURCE_DIR}/docs/config.md)
# docs/from-trl.md names only keys the config table has, its TOML passes config check, and each TRL field
# the code points at a key (and each default the defaults test compares) is mapped to that key
add_test(NAME cli-docs-from-trl COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/from_trl_mapping.py $<TARGET_FILE:rayless>
         ${CMAKE_SOURCE_DIR}/docs/from-trl.md)
# no lambda uses a structured binding of its scope: gcc takes it, clang (the sanitizer build) refuses it
add_test(NAME source-no-lambda-captured-bindings COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tools/check_lambda_bindings.py
         ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/tools)
# tools/README.md has a row for every file in tools/ and names none that has gone
add_test(NAME tools-readme-lists-every-tool COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/tools_readme_lists_tools.py)
# the generation engine's settings: "auto" or an integer >= 1; 0 is refused with one line
add_test(NAME cli-config-engine-settings-exit2 COMMAND sh -c "\
  $<TARGET_FILE:rayless> config check ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set generation.slots=0 2>e1.txt; r1=$?; \
  $<TARGET_FILE:rayless> config check ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set generation.sync_interval=0 2>e2.txt; r2=$?; \
  $<TARGET_FILE:rayless> config check ${CMAKE_SOURCE_DIR}/configs/ci-small.toml --set generation.slots=4 \
    --set generation.sync_interval=8 --set generation.prefill_chunk=512 >/dev/null; r3=$?; \
  cat e1.txt e2.txt; [ $r1 -eq 2 ] && [ $r2 -eq 2 ] && [ $r3 -eq 0 ] && [ $(wc -l < e1.txt) -eq 1 ] && \
  [ $(wc -l < e2.txt) -eq 1 ] && \
  grep -q 'generation.slots = 0 (an integer) is not allowed: expected .auto. or an integer >= 1' e1.txt && \
  grep -q 'generation.sync_interval = 0 (an integer) is not allowed: expected .auto. or an integer >= 1' e2.txt")
set_tests_properties(cli-config-typo-exit2 cli-config-type-exit2 cli-config-new-options-exit2 cli-config-zero-stage-exit2 cli-config-engine-settings-exit2
                     cli-config-lora-rules-exit2
                     cli-config-check-shipped cli-version
                     cli-unknown-command-exit2 cli-docs-match-code cli-docs-from-trl PROPERTIES WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# `rayless config show` on an empty config = TRL's GRPOConfig() defaults for every shared key
add_test(NAME cli-defaults-match-trl
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/defaults_match_trl.py $<TARGET_FILE:rayless>
                 ${CMAKE_SOURCE_DIR}/tests/data/grpo_config_defaults.json)

# main() bounds oneDNN's kernel cache (bfloat16 matmuls cache a kernel per shape: peak RSS grew every
# step) unless the user set it; `rayless version` reports the bound in force
add_test(NAME cli-version-onednn-kernel-cache COMMAND sh -c "\
  env -u ONEDNN_PRIMITIVE_CACHE_CAPACITY -u DNNL_PRIMITIVE_CACHE_CAPACITY $<TARGET_FILE:rayless> version > v1.txt && cat v1.txt && \
  grep -qx 'onednn kernel cache 256 kernels' v1.txt && \
  ONEDNN_PRIMITIVE_CACHE_CAPACITY=1024 $<TARGET_FILE:rayless> version | grep -qx 'onednn kernel cache 1024 kernels' && \
  env -u ONEDNN_PRIMITIVE_CACHE_CAPACITY DNNL_PRIMITIVE_CACHE_CAPACITY=64 $<TARGET_FILE:rayless> version | grep -qx 'onednn kernel cache 64 kernels'")


# `rayless version` reports mimalloc's decommit delays as the running allocator read them from the
# environment (docs/hpc.md: the memory/step-time trade). Skipped (77) where the binary does not run
# on mimalloc 2.0 (the sanitizer build keeps ASan's allocator).
add_test(NAME cli-version-allocator-delays COMMAND sh -c "\
  env -u MIMALLOC_RESET_DELAY -u MIMALLOC_DECOMMIT_DELAY -u MIMALLOC_SEGMENT_DECOMMIT_DELAY $<TARGET_FILE:rayless> version > a1.txt && \
  grep '^allocator' a1.txt && { grep -q '^allocator mimalloc 2\\.0\\.' a1.txt || exit 77; } && \
  grep -qx 'allocator mimalloc 2\\.0\\.[0-9]* (decommit delay 25 ms, segment decommit delay 500 ms)' a1.txt && \
  MIMALLOC_RESET_DELAY=1000 MIMALLOC_SEGMENT_DECOMMIT_DELAY=5000 $<TARGET_FILE:rayless> version | \
    grep -q '(decommit delay 1000 ms, segment decommit delay 5000 ms)' && \
  MIMALLOC_DECOMMIT_DELAY=10 MIMALLOC_SEGMENT_DECOMMIT_DELAY=0 $<TARGET_FILE:rayless> version | \
    grep -q '(decommit delay 10 ms, segment decommit delay 0 ms)'")
set_tests_properties(cli-version-allocator-delays PROPERTIES SKIP_RETURN_CODE 77
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
