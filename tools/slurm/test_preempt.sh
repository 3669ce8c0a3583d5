#!/usr/bin/env bash
# ctest "slurm: preemption": an uninterrupted run (slurm/cpu.sbatch) and a preempted one
# (slurm/preemptible.sbatch, sent `scancel --batch --signal=USR1` after its first step) must end in
# the same final model.safetensors. The preempted job must checkpoint (exit 3), requeue itself, run
# again with SLURM_RESTART_COUNT=1 and --resume auto, and end COMPLETED with Restarts=1.
#   test_preempt.sh RAYLESS_BINARY WORK_DIR [--fake]
# --fake uses tools/slurm/fake_train.sh (requeue mechanics without the trainer). While `rayless
# train --help` fails, the real test reports "trainer not available" and is skipped (exit 77), or
# fails when RAYLESS_REQUIRE_TRAINER=1. Knobs: RAYLESS_TEST_CONFIG (configs/ci-small.toml),
# RAYLESS_TEST_PREEMPT_STEPS (40: long enough that the signal lands mid-run on an idle machine), RAYLESS_TEST_TIMEOUT (seconds per job, 400).
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
bin=${1:?usage: test_preempt.sh RAYLESS_BINARY WORK_DIR [--fake]}
work=${2:?usage: test_preempt.sh RAYLESS_BINARY WORK_DIR [--fake]}
fake=0
[ "${3:-}" = --fake ] && fake=1
slurm_require_cluster
steps=${RAYLESS_TEST_PREEMPT_STEPS:-40}
if [ $fake = 1 ]; then
  bin=$root_dir/tools/slurm/fake_train.sh
  export FAKE_STEP_SECONDS=1
  steps=6
else
  rayless_require_trainer "$bin"
fi
config=${RAYLESS_TEST_CONFIG:-$root_dir/configs/ci-small.toml}
limit=${RAYLESS_TEST_TIMEOUT:-400}
rm -rf "$work" && mkdir -p "$work"
job=""
fail() { slurm_fail "$@"; }
export RAYLESS_BIN=$bin RAYLESS_CONFIG=$config

# 1. the reference: no interruption
job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/reference \
        sbatch --parsable ${RAYLESS_TEST_SBATCH_ARGS:-} --output="$work/reference-%j.out" slurm/cpu.sbatch --set "train.max_steps=$steps" --set checkpoint.save_steps=10) \
  || fail "sbatch slurm/cpu.sbatch failed"
job=${job%%;*}
state=$(slurm_wait_job "$job" "$limit")
echo "reference job $job ended $state"
[ "$state" = COMPLETED ] || fail "reference job $job ended $state"

# 2. the preempted run
job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/preempted \
        sbatch --parsable ${RAYLESS_TEST_SBATCH_ARGS:-} --output="$work/preempted-%j.out" slurm/preemptible.sbatch --set "train.max_steps=$steps" --set checkpoint.save_steps=10) \
  || fail "sbatch slurm/preemptible.sbatch failed"
job=${job%%;*}
log=$work/preempted-$job.out
slurm_wait_running "$job" 120 || fail "job $job did not start"
# signal once the first step is logged, so that the checkpoint falls mid-run
slurm_wait_first_step "$job" "$work/preempted" "$limit" || fail "no step was logged to $work/preempted/metrics.jsonl"
echo "first step logged: scancel --batch --signal=USR1 $job"
scancel --batch --signal=USR1 "$job" || fail "scancel --batch --signal=USR1 failed"
state=$(slurm_wait_job "$job" "$limit")
echo "preempted job $job ended $state"
cat "$log"
[ "$state" = COMPLETED ] || fail "preempted job $job ended $state, expected COMPLETED"
restarts=$(slurm_job_field "$job" Restarts)
[ "$restarts" = 1 ] || fail "job $job restarted $restarts times, expected 1 (signal too late? raise RAYLESS_TEST_PREEMPT_STEPS)"
grep -q 'training step exited with code 3' "$log" || fail "the first run did not exit with code 3 (checkpointed)"
grep -q 'restart 1,' "$log" || fail "the second run did not see SLURM_RESTART_COUNT=1"
grep -q -- '--resume auto' "$log" || fail "the second run was not given --resume auto"

final=$(printf 'checkpoints/step-%08d/model.safetensors' "$steps")
[ -s "$work/reference/$final" ] || fail "reference has no $final"
[ -s "$work/preempted/$final" ] || fail "preempted run has no $final"
cmp "$work/reference/$final" "$work/preempted/$final" \
  || fail "resumed run's $final differs from the uninterrupted run's"
# the checkpoint written on the signal must hold earlier weights: the resumed run trained on from it
for early in "$work"/preempted/checkpoints/step-*/model.safetensors; do
  [ "$early" = "$work/preempted/$final" ] && continue
  cmp -s "$early" "$work/preempted/$final" && fail "$early equals the final weights: nothing trained after the resume"
done
echo "PASS: checkpoint on SIGUSR1, requeue, resume; final $final identical to the uninterrupted run"
