#!/usr/bin/env bash
# ctest "slurm: cpu.sbatch trains": slurm/cpu.sbatch runs a 2-task `rayless train` of a few steps on
# the private Slurm; the job must end COMPLETED with exit code 0 and leave the final checkpoint
# OUTPUT/checkpoints/step-NNNNNNNN/model.safetensors.
#   test_train.sh RAYLESS_BINARY WORK_DIR [--fake]
# --fake runs tools/slurm/fake_train.sh instead (tests the plumbing without the trainer). While
# `rayless train --help` fails, the real test reports "trainer not available" and is skipped (exit
# 77), or fails when RAYLESS_REQUIRE_TRAINER=1. Knobs: RAYLESS_TEST_CONFIG (configs/ci-small.toml),
# RAYLESS_TEST_STEPS (3), RAYLESS_TEST_TIMEOUT (seconds per job, 400).
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
bin=${1:?usage: test_train.sh RAYLESS_BINARY WORK_DIR [--fake]}
work=${2:?usage: test_train.sh RAYLESS_BINARY WORK_DIR [--fake]}
fake=0
[ "${3:-}" = --fake ] && fake=1
slurm_require_cluster
if [ $fake = 1 ]; then
  bin=$root_dir/tools/slurm/fake_train.sh
  export FAKE_STEP_SECONDS=0.3
else
  rayless_require_trainer "$bin"
fi
steps=${RAYLESS_TEST_STEPS:-3}
config=${RAYLESS_TEST_CONFIG:-$root_dir/configs/ci-small.toml}
limit=${RAYLESS_TEST_TIMEOUT:-400}
rm -rf "$work" && mkdir -p "$work"
job=""
fail() { echo "FAIL: $*" >&2; [ -n "$job" ] && slurm_report_job "$job" "$work"/*.out "$work"/run/*.log >&2; exit 1; }

echo "submitting: RAYLESS_BIN=$bin RAYLESS_CONFIG=$config sbatch slurm/cpu.sbatch --set train.max_steps=$steps"
job=$(cd "$root_dir" && RAYLESS_BIN=$bin RAYLESS_CONFIG=$config RAYLESS_OUTPUT=$work/run \
        sbatch --parsable --output="$work/train-%j.out" slurm/cpu.sbatch --set "train.max_steps=$steps") \
  || fail "sbatch failed"
job=${job%%;*}
state=$(slurm_wait_job "$job" "$limit")
echo "job $job ended $state"
cat "$work/train-$job.out"
[ "$state" = COMPLETED ] || fail "job $job ended $state, expected COMPLETED"
[ "$(slurm_job_field "$job" ExitCode)" = 0:0 ] || fail "job $job exit code $(slurm_job_field "$job" ExitCode)"
grep -q 'rayless-job: running: srun --mpi=pmix' "$work/train-$job.out" || fail "cpu.sbatch did not print its command"
checkpoint=$(printf '%s/run/checkpoints/step-%08d/model.safetensors' "$work" "$steps")
[ -s "$checkpoint" ] || { ls -R "$work/run" >&2; fail "no final checkpoint $checkpoint"; }
echo "PASS: cpu.sbatch trained $steps steps; checkpoint $checkpoint"
