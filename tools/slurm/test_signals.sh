#!/usr/bin/env bash
# ctest "slurm: SIGTERM checkpoints": the rows batch-stop, ranks-term and batch-twice of
# docs/hpc.md's signal table. slurm/cpu.sbatch runs a long 2-task `rayless train`; it is sent SIGTERM
#  - ranks: after its first step, to the ranks (scancel --signal=TERM JOBID: srun's tasks get it from
#    slurmd): every rank checkpoints, exit 3;
#  - batch: after its first step, to the batch shell only (scancel --batch --signal=TERM JOBID: the
#    script turns it into SIGUSR1 for srun, since srun answers SIGTERM by killing its tasks): exit 3;
#  - twice: twice to the batch shell during a first step of several seconds (64 completions of up to
#    128 tokens): the second becomes SIGTERM to srun, which kills the tasks: exit 137, no checkpoint.
# (Written when the sbatch scripts exec'd srun, so SIGTERM to the shell killed the step without a
# checkpoint; the third when the docs said a second SIGTERM ends with 143.)
#   test_signals.sh RAYLESS_BINARY WORK_DIR
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
source "$root_dir/tools/signal_table.sh"
bin=${1:?usage: test_signals.sh RAYLESS_BINARY WORK_DIR}
work=${2:?usage: test_signals.sh RAYLESS_BINARY WORK_DIR}
slurm_require_cluster
rayless_trainer_available "$bin" || { echo "trainer not available"; exit 77; }
limit=${RAYLESS_TEST_TIMEOUT:-400}
rm -rf "$work" && mkdir -p "$work"
job=""
fail() { slurm_fail "$@"; }
export RAYLESS_BIN=$bin RAYLESS_CONFIG=$root_dir/configs/ci-small.toml

for how in ranks batch twice; do
  args=(--set train.max_steps=400 --set checkpoint.save_steps=1000)
  [ $how = twice ] && args+=(--set generation.max_completion_length=128 --set train.per_device_train_batch_size=16)
  out=$work/$how.out
  job=$(cd "$root_dir" && RAYLESS_OUTPUT=$work/$how \
          sbatch --parsable --output="$out" slurm/cpu.sbatch "${args[@]}") || fail "sbatch failed"
  job=${job%%;*}
  slurm_wait_running "$job" 120 || fail "job $job did not start"
  case $how in
    ranks)
      slurm_wait_first_step "$job" "$work/$how" "$limit" || fail "no step was logged"
      echo "first step logged: scancel --signal=TERM $job"
      scancel --signal=TERM "$job" || fail "scancel failed"
      ;;
    batch)
      slurm_wait_first_step "$job" "$work/$how" "$limit" || fail "no step was logged"
      echo "first step logged: scancel --batch --signal=TERM $job"
      scancel --batch --signal=TERM "$job" || fail "scancel failed"
      ;;
    twice)
      for ((i = 0; i < limit * 10; i++)); do grep -q "rank(s) x" "$out" 2>/dev/null && break; sleep 0.1; done
      grep -q "rank(s) x" "$out" || fail "no start line in $out"
      echo "ranks started: scancel --batch --signal=TERM $job, twice"
      scancel --batch --signal=TERM "$job" || fail "scancel failed"
      sleep 0.3  # two signals at once merge into one while pending
      scancel --batch --signal=TERM "$job" || fail "scancel failed"
      ;;
  esac
  state=$(slurm_wait_job "$job" "$limit")
  code=$(slurm_job_field "$job" ExitCode)
  echo "job $job ($how) ended $state, ExitCode=$code"
  cat "$out"
  latest=$(cat "$work/$how/checkpoints/latest" 2>/dev/null)
  checkpoint=no
  [ -n "$latest" ] && [ -f "$work/$how/checkpoints/$latest/model.safetensors" ] && checkpoint=yes
  rc=$(sed -n 's/^rayless-job: training step exited with code \([0-9]*\) .*/\1/p' "$out")
  [ "$code" = "$rc:0" ] || fail "ExitCode $code, but the training step exited with $rc"
  case $how in
    ranks | batch)
      grep -q "received: checkpointing at micro-step" "$out" || fail "no checkpointing line"
      if [ $how = ranks ]; then signal_table_check ranks-term "$checkpoint" "exit $rc"
      else signal_table_check batch-stop "$checkpoint" "exit $rc"; fi
      ;;
    twice)
      grep -q "second SIGTERM .*stopping the ranks now" "$out" || fail "the script did not take the second SIGTERM"
      signal_table_check batch-twice "$checkpoint" "exit $rc"
      ;;
  esac
  echo "PASS: SIGTERM ($how) -> checkpoint $checkpoint, exit $rc"
done
