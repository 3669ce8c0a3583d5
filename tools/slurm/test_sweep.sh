#!/usr/bin/env bash
# ctest "slurm: sweep.sbatch array": a 2-task job array over optim.learning_rate, with the fake
# trainer: each array task must run with its own --set value in its own run directory.
#   test_sweep.sh WORK_DIR
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
work=${1:?usage: test_sweep.sh WORK_DIR}
slurm_require_cluster
rm -rf "$work" && mkdir -p "$work"
job=""
fail() { echo "FAIL: $*" >&2; [ -n "$job" ] && slurm_report_job "${job}_0" "$work"/*.out >&2; exit 1; }
export FAKE_STEP_SECONDS=0.2
values="1e-3 2e-3"
job=$(cd "$root_dir" && RAYLESS_BIN=$root_dir/tools/slurm/fake_train.sh RAYLESS_OUTPUT=$work/sweep \
        RAYLESS_SWEEP_KEY=optim.learning_rate RAYLESS_SWEEP_VALUES="$values" \
        sbatch --parsable ${RAYLESS_TEST_SBATCH_ARGS:-} --array=0-1 --ntasks=1 --output="$work/sweep-%A_%a.out" slurm/sweep.sbatch \
          --set train.max_steps=2) || fail "sbatch failed"
job=${job%%;*}
for task in 0 1; do
  state=$(slurm_wait_job "${job}_$task" 120)
  echo "array task ${job}_$task ended $state"
  [ "$state" = COMPLETED ] || fail "array task $task ended $state"
done
task=0
for value in $values; do
  args=$work/sweep/optim.learning_rate=$value/fake-args.txt
  [ -f "$args" ] || fail "array task $task wrote no $args"
  grep -q -- "--set optim.learning_rate=$value " "$args" || fail "array task $task ran with: $(cat "$args")"
  task=$((task + 1))
done
cat "$work"/sweep-*.out
echo "PASS: one run directory and one --set value per array task"
