#!/usr/bin/env bash
# ctest "slurm: time limit": the real time-limit path of slurm/preemptible.sbatch (the row timelimit
# of docs/hpc.md's signal table). The job is submitted with --time=2 --signal=B:USR1@60 and a run
# longer than its first allocation; nobody sends it anything. Slurm itself must signal the batch shell before the limit, the ranks checkpoint
# (exit 3), the script requeues the job, the next allocation resumes with --resume auto, and the
# job ends COMPLETED (never TIMEOUT) with Restarts >= 1 and the final weights of an uninterrupted run.
#   test_timelimit.sh RAYLESS_BINARY WORK_DIR [--fake]
# --fake uses tools/slurm/fake_train.sh with 10-second steps (the mechanics, independent of machine
# speed); its uninterrupted result is known without a reference job. Slurm sends the warning signal
# up to a minute early (its time-limit checks run periodically: see `man sbatch`, --signal), so the
# number of allocations is not fixed; the test prints it and the second-by-second log of each.
# Knobs: RAYLESS_TEST_CONFIG (configs/ci-small.toml), RAYLESS_TEST_TIMELIMIT_STEPS (real: measured
# so that the run takes about 100 s),
# RAYLESS_TEST_TIMEOUT (seconds per job, 900).
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
source "$root_dir/tools/signal_table.sh"
usage="usage: test_timelimit.sh RAYLESS_BINARY WORK_DIR [--fake]"
bin=${1:?$usage}
work=${2:?$usage}
fake=0
[ "${3:-}" = --fake ] && fake=1
slurm_require_cluster
steps=${RAYLESS_TEST_TIMELIMIT_STEPS:-0}
if [ $fake = 1 ]; then
  bin=$root_dir/tools/slurm/fake_train.sh
  export FAKE_STEP_SECONDS=10
  steps=9 # 90 s: past the latest moment Slurm may signal a 2-minute job (60 s before its end)
else
  rayless_require_trainer "$bin"
fi
config=${RAYLESS_TEST_CONFIG:-$root_dir/configs/ci-small.toml}
limit=${RAYLESS_TEST_TIMEOUT:-900}
rm -rf "$work" && mkdir -p "$work"
job=""
fail() { slurm_fail "$@"; }
export RAYLESS_BIN=$bin RAYLESS_CONFIG=$config

# 0. (real trainer) how many steps last ~100 s here: long enough that Slurm's warning (at most 60 s
# after the start of a 2-minute job) always lands mid-run, short enough for CI. A 30-step job measures
# the step time (the mean of metrics.jsonl's step_time over its last 20 steps).
if [ $fake = 0 ] && [ -z "${RAYLESS_TEST_TIMELIMIT_STEPS:-}" ]; then
  job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/calibrate \
          sbatch --parsable ${RAYLESS_TEST_SBATCH_ARGS:-} --output="$work/calibrate-%j.out" slurm/cpu.sbatch \
            --set train.max_steps=30 --set checkpoint.save_steps=1000) \
    || fail "sbatch slurm/cpu.sbatch (calibration) failed"
  job=${job%%;*}
  state=$(slurm_wait_job "$job" "$limit")
  [ "$state" = COMPLETED ] || fail "calibration job $job ended $state"
  steps=$(python3 -c '
import json, math, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
times = [row["step_time"] for row in rows if "step_time" in row][-20:]
print(max(200, math.ceil(100 / (sum(times) / len(times)))))' "$work/calibrate/metrics.jsonl") \
    || fail "cannot read step times from $work/calibrate/metrics.jsonl"
  echo "calibration: $steps steps take about 100 s here"
fi
final=$(printf 'checkpoints/step-%08d/model.safetensors' "$steps")

# 1. the reference: no interruption (the fake trainer's final file is known: one line per step)
if [ $fake = 1 ]; then
  mkdir -p "$(dirname "$work/reference/$final")"
  seq 1 "$steps" | sed 's/^/trained step /' >"$work/reference/$final"
else
  job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/reference \
          sbatch --parsable ${RAYLESS_TEST_SBATCH_ARGS:-} --output="$work/reference-%j.out" slurm/cpu.sbatch \
            --set "train.max_steps=$steps" --set checkpoint.save_steps=1000) \
    || fail "sbatch slurm/cpu.sbatch failed"
  job=${job%%;*}
  start=$(date +%s)
  state=$(slurm_wait_job "$job" "$limit")
  echo "reference job $job ended $state after $(($(date +%s) - start)) s"
  [ "$state" = COMPLETED ] || fail "reference job $job ended $state"
fi

# 2. the same run under a 2-minute limit, warned 60 s before it
job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/limited \
        sbatch --parsable ${RAYLESS_TEST_SBATCH_ARGS:-} --time=2 --signal=B:USR1@60 \
          --output="$work/limited-%j.out" slurm/preemptible.sbatch \
          --set "train.max_steps=$steps" --set checkpoint.save_steps=1000) \
  || fail "sbatch --time=2 --signal=B:USR1@60 slurm/preemptible.sbatch failed"
job=${job%%;*}
log=$work/limited-$job.out
echo "time-limited job $job: $(slurm_job_field "$job" TimeLimit) limit, $steps steps"
state=$(slurm_wait_job "$job" "$limit")
restarts=$(slurm_job_field "$job" Restarts)
echo "time-limited job $job ended $state after $restarts restart(s)"
cat "$log"
[ $fake = 0 ] || cat "$work"/limited/fake-rank-*.log
[ "$state" = COMPLETED ] || fail "time-limited job $job ended $state, expected COMPLETED (TIMEOUT: the USR1 warning did not stop it in time)"
[ "${restarts:-0}" -ge 1 ] || fail "job $job was never requeued: the run ended inside its first 2-minute allocation (raise the steps)"
checkpointed=$(grep -c 'training step exited with code 3' "$log")
[ "$checkpointed" = "$restarts" ] || fail "$restarts restarts but $checkpointed checkpoint exits (code 3) in $log"
grep -q 'restart 1,' "$log" || fail "the second allocation did not see SLURM_RESTART_COUNT=1"
grep -q -- '--resume auto' "$log" || fail "the second allocation was not given --resume auto"
# each allocation must have trained: a requeue loop that makes no progress would never end
# and every rank got the warning (the fake trainer logs each rank; the real one's exit 3 says so)
if [ $fake = 1 ]; then
  for rank_log in "$work"/limited/fake-rank-*.log; do
    grep -q 'signal received' "$rank_log" || fail "$(basename "$rank_log" .log) never received the signal"
  done
fi

[ -s "$work/reference/$final" ] || fail "reference has no $final"
[ -s "$work/limited/$final" ] || fail "time-limited run has no $final"
cmp "$work/reference/$final" "$work/limited/$final" \
  || fail "time-limited run's $final differs from the uninterrupted run's"
# every allocation but the last checkpointed (exit 3) on the warning and requeued
signal_table_check timelimit "$([ "$checkpointed" -ge 1 ] && echo yes || echo no)" "requeued, $state"
echo "PASS: Slurm's own time-limit warning (--time=2 --signal=B:USR1@60) -> checkpoint -> requeue; finished in allocation $((restarts + 1)); final $final identical to the uninterrupted run"
