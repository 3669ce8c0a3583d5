#!/usr/bin/env bash
# Fuzzes the readers of outside bytes with libFuzzer (issue 17 §2; docs/reliability.md), under ASan +
# UBSan, in build-sanitize/ (built here when needed, as tools/sanitize.sh does).
#
# usage: tools/fuzz.sh [TARGET|all] [SECONDS]     (default: all, 60 s each)
#   targets: tests/fuzz/targets/*.cpp (safetensors, safetensors_index, model_config, tokenizer,
#   chat_template, toml_config, jsonl_dataset, worker_reply, rollout_file)
# Each target starts from its seed corpus (tests/data/fuzz/corpus/TARGET, read only) and the
# regression inputs (tests/data/fuzz/regressions/TARGET); what it learns goes to a scratch corpus
# (build-sanitize/fuzz-corpus/TARGET). A crash, a sanitizer report, a hang (> 10 s for one input) or an
# allocation over 2 GiB stops it: the input is saved under build-sanitize/fuzz-findings/TARGET/, and
# the script prints how to add it to the regressions. Prints executions per target.
# RAYLESS_FUZZ_JOBS: targets run at once (default: the number of cores). RAYLESS_FUZZ_NO_BUILD=1: use
# what is built (tools/test.sh, after tools/sanitize.sh).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sanitizers/lib.sh"
cd "$hardening_root"
which_target=${1:-all}
seconds=${2:-60}
targets=()
for source in tests/fuzz/targets/*.cpp; do
  name=$(basename "$source" .cpp)
  [ "$which_target" = all ] || [ "$which_target" = "$name" ] && targets+=("$name")
done
[ ${#targets[@]} -gt 0 ] || hdie "no fuzz target \"$which_target\" (see tests/fuzz/targets/)"

ensure_clang
if [ "${RAYLESS_FUZZ_NO_BUILD:-0}" = 1 ]; then
  for name in "${targets[@]}"; do
    [ -x "$sanitize_build_dir/tests/fuzz-$name" ] || hdie "$sanitize_build_dir/tests/fuzz-$name is not built"
  done
else
  build_sanitized "${targets[@]/#/fuzz-}"
fi
sanitizer_env
# libFuzzer's own checks replace ASan's leak check at exit (per input: -detect_leaks)
export ASAN_OPTIONS="$ASAN_OPTIONS:abort_on_error=0"

results=$sanitize_build_dir/fuzz-results
rm -rf "$results"; mkdir -p "$results"
run_one() {
  local name=$1 corpus=$sanitize_build_dir/fuzz-corpus/$1 findings=$sanitize_build_dir/fuzz-findings/$1 inputs=()
  mkdir -p "$corpus" "$findings"
  inputs=("$corpus" tests/data/fuzz/corpus/"$name")
  [ -d tests/data/fuzz/regressions/"$name" ] && inputs+=(tests/data/fuzz/regressions/"$name")
  local rc=0
  # libhdf5's own leaks on damaged files are told apart by full stacks (lsan.supp); run_one runs in a
  # subshell, so this stays with this target
  if [ "$name" = rollout_file ]; then export LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0"; fi
  "$sanitize_build_dir/tests/fuzz-$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -malloc_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/" "${inputs[@]}" > "$results/$name.log" 2>&1 || rc=$?
  echo $rc > "$results/$name.rc"
}
jobs_at_once=${RAYLESS_FUZZ_JOBS:-$(nproc)}
hsay "fuzzing ${targets[*]} for $seconds s each, $jobs_at_once at a time"
for name in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_at_once" ]; do sleep 1; done
  run_one "$name" &
done
wait

failed=0
printf '%-20s %12s %10s %8s  %s\n' target executions exec/s corpus result
for name in "${targets[@]}"; do
  log=$results/$name.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  units=$(ls "$sanitize_build_dir/fuzz-corpus/$name" | wc -l)
  if [ "$(cat "$results/$name.rc")" = 0 ]; then
    printf '%-20s %12s %10s %8s  %s\n' "$name" "$execs" "$rate" "$units" "no finding"
  else
    failed=1
    artifact=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | sed 's/Test unit written to //')
    printf '%-20s %12s %10s %8s  %s\n' "$name" "$execs" "$rate" "$units" "FINDING: ${artifact:-see $log}"
    grep -m3 -E "ERROR: (AddressSanitizer|libFuzzer)|runtime error|==ERROR|terminate called|uncaught" "$log" | sed 's/^/    /' || true
    [ -n "$artifact" ] && echo "    keep it as a regression: cp $artifact tests/data/fuzz/regressions/$name/"
  fi
done
exit $failed
