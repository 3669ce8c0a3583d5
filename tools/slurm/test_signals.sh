#!/usr/bin/env bash
# ctest "slurm: SIGTERM checkpoints": slurm/cpu.sbatch runs a long 2-task `rayless train`; after its
# first step it is sent SIGTERM, once to the ranks (scancel --signal=TERM JOBID: srun's tasks get it
# from slurmd) and once to the batch shell only (scancel --batch --signal=TERM JOBID: the script turns
# it into SIGUSR1 for srun, since srun answers SIGTERM by killing its tasks). Both times the job must
# end with exit code 3 and a complete checkpoint. (Written when the sbatch scripts exec'd srun, so
# SIGTERM to the shell killed the step without a checkpoint.)
#   test_signals.sh RAYLESS_BINARY WORK_DIR
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
bin=${1:?usage: test_signals.sh RAYLESS_BINARY WORK_DIR}
work=${2:?usage: test_signals.sh RAYLESS_BINARY WORK_DIR}
slurm_require_cluster
rayless_trainer_available "$bin" || { echo "trainer not available"; exit 77; }
limit=${RAYLESS_TEST_TIMEOUT:-400}
rm -rf "$work" && mkdir -p "$work"
job=""
fail() { slurm_fail "$@"; }
export RAYLESS_BIN=$bin RAYLESS_CONFIG=$root_dir/configs/ci-small.toml

for how in "ranks" "batch"; do
  job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/$how \
          sbatch --parsable --output="$work/$how-%j.out" slurm/cpu.sbatch --set train.max_steps=400 --set checkpoint.save_steps=1000) \
    || fail "sbatch failed"
  job=${job%%;*}
  slurm_wait_running "$job" 120 || fail "job $job did not start"
  slurm_wait_first_step "$job" "$work/$how" "$limit" || fail "no step was logged"
  if [ "$how" = ranks ]; then
    echo "first step logged: scancel --signal=TERM $job"
    scancel --signal=TERM "$job" || fail "scancel failed"
  else
    echo "first step logged: scancel --batch --signal=TERM $job"
    scancel --batch --signal=TERM "$job" || fail "scancel failed"
  fi
  state=$(slurm_wait_job "$job" "$limit")
  code=$(slurm_job_field "$job" ExitCode)
  echo "job $job ($how) ended $state, ExitCode=$code"
  cat "$work/$how-$job.out"
  [ "$code" = "3:0" ] || fail "SIGTERM ($how): ExitCode $code, expected 3:0"
  grep -q "training step exited with code 3" "$work/$how-$job.out" || fail "the step did not exit 3"
  grep -q "received: checkpointing at micro-step" "$work/$how-$job.out" || fail "no checkpointing line"
  latest=$(cat "$work/$how/checkpoints/latest" 2>/dev/null) || fail "no checkpoint"
  [ -f "$work/$how/checkpoints/$latest/model.safetensors" ] || fail "checkpoint $latest incomplete"
  echo "PASS: SIGTERM to the $how -> checkpoint $latest, exit 3"
done
