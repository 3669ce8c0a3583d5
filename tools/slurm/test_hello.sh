#!/usr/bin/env bash
# ctest "slurm: sbatch MPI hello": the private Slurm runs a 2-task MPI program through
# `sbatch --wait` + `srun --mpi=pmix`, and the job ends COMPLETED with both ranks in one world. A
# second job whose ranks report a wrong world size must end FAILED (the check can fail).
#   test_hello.sh MPI_HELLO_BINARY WORK_DIR        (exit 77 = skipped: no local Slurm)
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$root_dir/tools/slurm/lib.sh"
hello=${1:?usage: test_hello.sh MPI_HELLO_BINARY WORK_DIR}
work=${2:?usage: test_hello.sh MPI_HELLO_BINARY WORK_DIR}
slurm_require_cluster
rm -rf "$work" && mkdir -p "$work"
fail() { slurm_fail "$@"; }

state=$(sinfo -h -N -o '%T' | head -n 1)
[[ $state == idle || $state == mixed || $state == allocated ]] || fail "node state is '$state'"

cat >"$work/hello.sbatch" <<SCRIPT
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --time=00:05:00
srun --mpi=pmix "$hello" \${EXPECTED_SIZE:-2}
SCRIPT

echo "submitting: sbatch --wait $work/hello.sbatch"
job=$(sbatch --parsable --wait --job-name=rayless-hello --output="$work/hello-%j.out" "$work/hello.sbatch")
rc=$?
job=${job%%;*}
echo "job $job: sbatch --wait exit $rc"
[ "$rc" -eq 0 ] || fail "sbatch --wait exited $rc"
state=$(slurm_job_field "$job" JobState)
[ "$state" = COMPLETED ] || fail "job $job ended $state, expected COMPLETED"
out=$work/hello-$job.out
cat "$out"
grep -q 'rank 0 of 2, sum of ranks 1$' "$out" || fail "rank 0 did not report a 2-rank world"
grep -q 'rank 1 of 2, sum of ranks 1$' "$out" || fail "rank 1 did not report a 2-rank world"

# the negative control: ranks that expect 3 peers exit 1, and the job must end FAILED
job=$(EXPECTED_SIZE=3 sbatch --parsable --job-name=rayless-hello-bad --output="$work/bad-%j.out" "$work/hello.sbatch")
job=${job%%;*}
state=$(slurm_wait_job "$job" 120)
echo "negative control job $job ended $state"
[ "$state" = FAILED ] || fail "a job whose ranks exit 1 ended $state, expected FAILED"
job=""
echo "PASS: MPI hello through sbatch/srun --mpi=pmix"
