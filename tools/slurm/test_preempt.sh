#!/usr/bin/env bash
# ctest "slurm: preemption": the rows preempt-at-start, preempt, preempt-ranks and cancel of
# docs/hpc.md's signal table, and a job submitted from another directory.
#  1. The reference: slurm/cpu.sbatch submitted from a directory outside the checkout, without
#     RAYLESS_HOME: the script finds its checkout through Slurm, the config's paths resolve against
#     the config's directory, and the run finishes uninterrupted.
#  2. A slurm/preemptible.sbatch job preempted three times, each time checkpointing (exit 3),
#     requeueing itself and resuming with --resume auto: scancel --batch --signal=USR1 while its ranks
#     still start (a stand-in that takes 3 s to start, tools/slurm/slow_start.sh, right after srun
#     began: within the first second of RUNNING), again after the next allocation's first step, and
#     scancel --signal=USR1 (the ranks, no --batch) after the third's. It must end COMPLETED with
#     Restarts=3 and the final model.safetensors of the reference.
#  3. A plain `scancel JOB` of a preemptible job after its first step: CANCELLED, a checkpoint, no
#     requeue (Restarts=0).
# (Written when a plain scancel requeued the job, a signal at start failed it, and a job submitted
# elsewhere could not find its files.)
#   test_preempt.sh RAYLESS_BINARY WORK_DIR [--fake]
# --fake uses tools/slurm/fake_train.sh (the mechanics without the trainer). While `rayless train
# --help` fails, the real test reports "trainer not available" and is skipped (exit 77), or fails
# when RAYLESS_REQUIRE_TRAINER=1. Knobs: RAYLESS_TEST_CONFIG (configs/ci-small.toml),
# RAYLESS_TEST_PREEMPT_STEPS (40: long enough that every signal lands mid-run on an idle machine),
# RAYLESS_TEST_TIMEOUT (seconds per job, 400), RAYLESS_TEST_SBATCH_ARGS (extra sbatch arguments).
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
source "$root_dir/tools/signal_table.sh"
bin=${1:?usage: test_preempt.sh RAYLESS_BINARY WORK_DIR [--fake]}
work=${2:?usage: test_preempt.sh RAYLESS_BINARY WORK_DIR [--fake]}
fake=0
[ "${3:-}" = --fake ] && fake=1
slurm_require_cluster
steps=${RAYLESS_TEST_PREEMPT_STEPS:-40}
if [ $fake = 1 ]; then
  bin=$root_dir/tools/slurm/fake_train.sh
  export FAKE_STEP_SECONDS=1
  steps=8
else
  rayless_require_trainer "$bin"
  bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")  # a job submitted elsewhere runs there
fi
config=${RAYLESS_TEST_CONFIG:-$root_dir/configs/ci-small.toml}
limit=${RAYLESS_TEST_TIMEOUT:-400}
rm -rf "$work" && mkdir -p "$work/elsewhere"
job=""
fail() { slurm_fail "$@"; }
unset RAYLESS_HOME
export RAYLESS_BIN=$bin RAYLESS_CONFIG=$config
train_args=(--set "train.max_steps=$steps" --set checkpoint.save_steps=10)
# shellcheck disable=SC2206  # a word list by design
sbatch_args=(--parsable ${RAYLESS_TEST_SBATCH_ARGS:-})
lines() { wc -l <"$1/metrics.jsonl" 2>/dev/null || echo 0; }
step_of() { sed 's/[^0-9]//g; s/^0*//' "$1/checkpoints/latest" 2>/dev/null; }  # step-00000007 or 7 -> 7
# waits until job $1 has been requeued $2 times and runs again (at most $limit seconds)
wait_restarted() {
  local i
  for ((i = 0; i < limit * 5; i++)); do
    [ "$(slurm_job_field "$1" Restarts)" = "$2" ] && [ "$(slurm_job_field "$1" JobState)" = RUNNING ] && return 0
    sleep 0.2
  done
  return 1
}
# waits until run directory $1 has logged more than $2 steps while job $3 runs
wait_lines() {
  local i
  for ((i = 0; i < limit * 5; i++)); do
    [ "$(lines "$1")" -gt "$2" ] && return 0
    [ "$(slurm_job_field "$3" JobState)" = RUNNING ] || break
    sleep 0.2
  done
  [ "$(lines "$1")" -gt "$2" ]
}

# 1. the reference: no interruption, submitted from outside the checkout
job=$(cd "$work/elsewhere" && RAYLESS_OUTPUT=$work/reference \
        sbatch "${sbatch_args[@]}" --output="$work/reference-%j.out" "$root_dir/slurm/cpu.sbatch" "${train_args[@]}") \
  || fail "sbatch slurm/cpu.sbatch failed"
job=${job%%;*}
state=$(slurm_wait_job "$job" "$limit")
echo "reference job $job (submitted from $work/elsewhere) ended $state"
[ "$state" = COMPLETED ] || fail "reference job $job ended $state"
grep -q "checkout $root_dir," "$work/reference-$job.out" || fail "the job did not find its checkout $root_dir"

# 2. preempted three times
log_of() { echo "$work/preempted-$1.out"; }
job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/preempted RAYLESS_BIN=$root_dir/tools/slurm/slow_start.sh \
        SLOW_START_BIN=$bin SLOW_START_SECONDS=3 \
        sbatch "${sbatch_args[@]}" --output="$work/preempted-%j.out" slurm/preemptible.sbatch "${train_args[@]}") \
  || fail "sbatch slurm/preemptible.sbatch failed"
job=${job%%;*}
log=$(log_of "$job")
slurm_wait_running "$job" 120 || fail "job $job did not start"
for ((i = 0; i < 100; i++)); do scontrol show step "$job.0" >/dev/null 2>&1 && break; sleep 0.1; done
echo "srun started after $(slurm_job_field "$job" RunTime) of RUNNING: scancel --batch --signal=USR1 $job (its ranks still start)"
scancel --batch --signal=USR1 "$job" || fail "scancel --batch --signal=USR1 failed"
wait_restarted "$job" 1 || fail "job $job was not requeued after the signal at start"
first_checkpoint=$(step_of "$work/preempted")
[ "$first_checkpoint" = 1 ] || fail "the signal at start should checkpoint after the first step, got step '$first_checkpoint'"
grep -q "held until the ranks take signals" "$log" || fail "the script did not hold the signal at start"

n=$(lines "$work/preempted")
wait_lines "$work/preempted" "$n" "$job" || fail "allocation 2 logged no step"
echo "allocation 2 logged a step: scancel --batch --signal=USR1 $job"
scancel --batch --signal=USR1 "$job" || fail "scancel --batch --signal=USR1 failed"
wait_restarted "$job" 2 || fail "job $job was not requeued after the second signal"

n=$(lines "$work/preempted")
wait_lines "$work/preempted" "$n" "$job" || fail "allocation 3 logged no step"
echo "allocation 3 logged a step: scancel --signal=USR1 $job (the ranks)"
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 failed"

state=$(slurm_wait_job "$job" "$limit")
restarts=$(slurm_job_field "$job" Restarts)
echo "preempted job $job ended $state after $restarts restarts"
cat "$log"
[ "$state" = COMPLETED ] || fail "preempted job $job ended $state, expected COMPLETED"
[ "$restarts" = 3 ] || fail "job $job restarted $restarts times, expected 3 (a signal too late? raise RAYLESS_TEST_PREEMPT_STEPS)"
[ "$(grep -c 'training step exited with code 3' "$log")" = 3 ] || fail "expected three checkpointed allocations (exit 3)"
grep -q 'restart 3,' "$log" || fail "the last allocation did not see SLURM_RESTART_COUNT=3"
[ "$(grep -c -- '--resume auto' "$log")" -ge 3 ] || fail "the restarts were not given --resume auto"
final=$(printf 'checkpoints/step-%08d/model.safetensors' "$steps")
[ -s "$work/reference/$final" ] || fail "reference has no $final"
[ -s "$work/preempted/$final" ] || fail "preempted run has no $final"
cmp "$work/reference/$final" "$work/preempted/$final" \
  || fail "resumed run's $final differs from the uninterrupted run's"
# the checkpoints written on the signals hold earlier weights: the resumed runs trained on from them
for early in "$work"/preempted/checkpoints/step-*/model.safetensors; do
  [ "$early" = "$work/preempted/$final" ] && continue
  cmp -s "$early" "$work/preempted/$final" && fail "$early equals the final weights: nothing trained after the resume"
done
signal_table_check preempt-at-start yes "requeued, $state"
signal_table_check preempt yes "requeued, $state"
signal_table_check preempt-ranks yes "requeued, $state"
echo "PASS: three preemptions (at start, --batch, to the ranks) -> checkpoint, requeue, resume; final $final identical to the uninterrupted run"

# 3. a plain scancel is a cancel
job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/cancelled \
        sbatch "${sbatch_args[@]}" --output="$work/cancelled-%j.out" slurm/preemptible.sbatch "${train_args[@]}") \
  || fail "sbatch slurm/preemptible.sbatch failed"
job=${job%%;*}
log=$work/cancelled-$job.out
slurm_wait_running "$job" 120 || fail "job $job did not start"
slurm_wait_first_step "$job" "$work/cancelled" "$limit" || fail "no step was logged to $work/cancelled/metrics.jsonl"
echo "first step logged: scancel $job"
scancel "$job" || fail "scancel failed"
state=$(slurm_wait_job "$job" "$limit")
sleep 3  # a requeue would show within the scheduler's interval
state=$(slurm_job_field "$job" JobState) restarts=$(slurm_job_field "$job" Restarts)
echo "cancelled job $job: $state, Restarts=$restarts"
cat "$log"
grep -q "Slurm is ending the job" "$log" || fail "the script did not see the cancel"
! grep -q "requeueing job" "$log" || fail "the cancelled job requeued itself"
checkpoint=no
[ -n "$(step_of "$work/cancelled")" ] && checkpoint=yes
requeued=", no requeue"
[ "$restarts" = 0 ] || requeued=", requeued"
signal_table_check cancel "$checkpoint" "$state$requeued"
echo "PASS: scancel $job -> $state$requeued, checkpoint at step $(step_of "$work/cancelled")"
