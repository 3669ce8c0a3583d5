#!/usr/bin/env bash
# ctest "slurm: jobs/train-local.sh launches ranks": the mpirun launcher starts 2 ranks of the fake
# trainer, SIGUSR1 to the launcher reaches every rank through mpirun (exit 3 with a checkpoint), and
# --resume auto finishes the run. Also checks the binding flags it chooses, and that the thread count
# it says reaches the ranks (distributed.threads_per_rank).
#   test_train_local.sh WORK_DIR
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:?usage: test_train_local.sh WORK_DIR}
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; tail -n 40 "$work"/*.log "$work"/run/*.log >&2 2>/dev/null; exit 1; }
launcher=$root_dir/jobs/train-local.sh
export RAYLESS_BIN=$root_dir/tools/slurm/fake_train.sh FAKE_STEP_SECONDS=1

# binding: 2 ranks x 1 thread fits any machine with 2 cores; 2 x 1000 threads oversubscribes
"$launcher" -n 2 -t 1 --dry-run >"$work/dry.log" || fail "--dry-run failed"
if [ "$(nproc)" -ge 2 ]; then
  grep -q -- '--map-by slot:PE=1 --bind-to core' "$work/dry.log" || fail "expected core binding: $(cat "$work/dry.log")"
fi
"$launcher" -n 2 -t 1000 --dry-run >"$work/dry2.log" 2>&1 || fail "--dry-run failed"
grep -q -- '--oversubscribe --bind-to none' "$work/dry2.log" || fail "expected no binding when oversubscribed"
# the threads it says are the threads the ranks run, bound or not
grep -q -- '--set distributed.threads_per_rank=1000' "$work/dry2.log" || fail "the ranks are not told the thread count said"
"$launcher" -n zero >/dev/null 2>&1
[ $? -eq 2 ] || fail "a bad --ranks must exit 2"

# a run interrupted with SIGUSR1 after its second step
"$launcher" -n 2 -t 1 -o "$work/run" --set train.max_steps=8 >"$work/first.log" 2>&1 &
pid=$!
for ((i = 0; i < 100; i++)); do
  [ "$({ wc -l <"$work/run/metrics.jsonl"; } 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 0.2
done
kill -USR1 "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 3 ] || fail "interrupted run exited $rc, expected 3 (checkpointed)"
grep -q 'rank 0: signal received' "$work/run/fake-rank-0.log" || fail "rank 0 did not get SIGUSR1"
grep -q 'rank 1: signal received' "$work/run/fake-rank-1.log" || fail "rank 1 did not get SIGUSR1"
[ -f "$work/run/checkpoints/latest" ] || fail "no checkpoint after SIGUSR1"
echo "SIGUSR1 reached both ranks; checkpoint at step $(cat "$work/run/checkpoints/latest")"

"$launcher" -n 2 -t 1 -o "$work/run" --resume auto --set train.max_steps=8 >"$work/second.log" 2>&1 \
  || fail "resumed run exited $?"
grep -q 'resumed from step' "$work/run/fake-rank-0.log" || fail "the second run did not resume"
[ -s "$work/run/checkpoints/step-00000008/model.safetensors" ] || fail "no final checkpoint"
echo "PASS: train-local.sh: 2 ranks, SIGUSR1 -> exit 3, --resume auto -> finished"
