#!/usr/bin/env bash
# The workstation rows of docs/hpc.md's signal table (each case ends in signal_table_check, which
# compares what it saw with the row):
#  (1) local-stop: jobs/train-local.sh (mpirun inside) gets SIGTERM after step 1: every rank
#      checkpoints, exit 3, one "SIGTERM received: checkpointing" line; the run then resumes with
#      --resume auto. (Written when plain mpirun killed the ranks: exit 1, no checkpoint, or training on.)
#  (2) rank-twice: a rank that gets SIGTERM twice stops at once: exit 143, no checkpoint.
#  (3) no-save-on-signal: with checkpoint.save_on_signal = false, SIGTERM ends the rank at once.
#  (4) local-stop-at-start: SIGTERM to train-local.sh while its ranks still start (a stand-in that
#      takes 2 s to start, tools/slurm/slow_start.sh): held until the ranks take signals, then
#      passed on; the ranks hold it while they load and checkpoint after their first step (exit 3).
#      (Written when the launcher passed it on at once and it killed the starting ranks.)
#  (5) local-twice: a second SIGTERM to train-local.sh stops the ranks at once (exit 1, no checkpoint).
#  (6) mpirun-usr1, (7) mpirun-term: plain mpirun forwards SIGUSR1 (checkpoint, exit 3), and answers
#      SIGTERM by killing the ranks a second later (no checkpoint when no step ends in that second).
# Cases 5 and 7 signal during a first micro-step of several seconds (64 completions of up to 128 tokens).
# usage: sigterm_checkpoints.sh RAYLESS TRAIN_UNTIL_SIGNAL
set -uo pipefail
rayless=$1; until_signal=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$src/tools/signal_table.sh"
work=$(mktemp -d /tmp/rayless-sigterm.XXXXXX)
cleanup() { [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
# waits until DIR/metrics.jsonl has a line (at most 300 s)
wait_for_step() {
  for _ in $(seq 3000); do
    [ -s "$1/metrics.jsonl" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# waits until log $1 has rank 0's start line (the model is loaded; the first step follows)
wait_for_start() {
  for _ in $(seq 3000); do
    grep -q "rank(s) x" "$1" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# "yes" when run directory $1 holds a complete checkpoint, else "no"
checkpointed() {
  local latest
  latest=$(cat "$1/checkpoints/latest" 2>/dev/null) && [ -f "$1/checkpoints/$latest/model.safetensors" ] && echo yes || echo no
}
long=(--set train.max_steps=200 --set checkpoint.save_steps=1000)
# a first micro-step of several seconds (32 completions a rank, of up to 1024 tokens; at 16 x 128
# a fast machine ended the step within mpirun's one second and checkpointed)
slow_steps=(--set train.max_steps=200 --set checkpoint.save_steps=1000 --set generation.max_completion_length=1024
            --set train.per_device_train_batch_size=32)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# (1) the launcher script, SIGTERM after step 1
RAYLESS_BIN=$rayless jobs/train-local.sh -n 2 -t 1 -c configs/ci-small.toml -o "$work/a" "${long[@]}" > "$work/a.log" 2>&1 &
pid=$!
wait_for_step "$work/a" || { cat "$work/a.log"; fail "no first step"; }
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
cat "$work/a.log"
[ $rc -eq 3 ] || fail "train-local.sh + SIGTERM: exit $rc, expected 3"
[ "$(grep -c "received: checkpointing at micro-step" "$work/a.log")" -eq 1 ] || fail "expected one checkpointing line"
latest=$(cat "$work/a/checkpoints/latest" 2>/dev/null) || fail "no checkpoint written"
[ -f "$work/a/checkpoints/$latest/model.safetensors" ] || fail "checkpoint $latest incomplete"
step=$(echo "$latest" | sed -E 's/^step-0*([0-9]+).*/\1/')
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/a" \
  --set "train.max_steps=$((step + 2))" --resume auto > "$work/a2.log" 2>&1 || { cat "$work/a2.log"; fail "resume after SIGTERM"; }
grep -q "resumed from .*$latest" "$work/a2.log" || { cat "$work/a2.log"; fail "did not resume from $latest"; }
signal_table_check local-stop yes "exit 3"
echo "PASS: train-local.sh + SIGTERM -> checkpoint $latest, exit 3, resumed"

# (2) two SIGTERMs to one rank: stop now. The hook of train-until-signal raises them back to back
# after micro-step 1 (from a shell, two kills either merge while pending or land after a fast step's
# checkpoint)
"$until_signal" --signal-at-micro-step 1 --signal-count 2 --config configs/ci-small.toml --output "$work/b" "${long[@]}" \
  > "$work/b.log" 2>&1
rc=$?
cat "$work/b.log"
[ $rc -eq 143 ] || fail "two SIGTERMs: exit $rc, expected 143 (128 + 15)"
[ ! -e "$work/b/checkpoints/latest" ] || fail "a second SIGTERM must not wait for a checkpoint"
! grep -q "checkpointing" "$work/b.log" || fail "no checkpointing line when none is written"
signal_table_check rank-twice "$(checkpointed "$work/b")" "exit $rc"
echo "PASS: a second SIGTERM stops at once (exit 143, no checkpoint)"

# (3) save_on_signal = false: SIGTERM is not caught
"$rayless" train --config configs/ci-small.toml --output "$work/c" "${long[@]}" --set checkpoint.save_on_signal=false \
  > "$work/c.log" 2>&1 &
pid=$!
wait_for_step "$work/c" || { cat "$work/c.log"; fail "no first step"; }
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
[ $rc -eq 143 ] && ! grep -q checkpointing "$work/c.log" || { cat "$work/c.log"; fail "save_on_signal=false: exit $rc"; }
signal_table_check no-save-on-signal "$(checkpointed "$work/c")" "exit $rc"
echo "PASS: checkpoint.save_on_signal = false: SIGTERM ends the run at once, no checkpointing line"

# (4) SIGTERM while the ranks start: held by the launcher until they take signals, then by the ranks
# until their first step ends
RAYLESS_BIN=$src/tools/slurm/slow_start.sh SLOW_START_BIN=$rayless SLOW_START_SECONDS=2 \
  jobs/train-local.sh -n 2 -t 1 -c configs/ci-small.toml -o "$work/d" "${long[@]}" > "$work/d.log" 2>&1 &
pid=$!
sleep 0.5
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
cat "$work/d.log"
# held by the script (before mpirun started, or while the ranks start), passed on once they take signals
grep -q "the ranks take signals now, .*: the request held" "$work/d.log" || fail "the launcher did not hold the early SIGTERM"
[ $rc -eq 3 ] || fail "SIGTERM while the ranks start: exit $rc, expected 3"
[ "$(cat "$work/d/checkpoints/latest" 2>/dev/null)" = step-00000001 ] \
  || fail "expected the checkpoint after the first step, got '$(cat "$work/d/checkpoints/latest" 2>/dev/null)'"
signal_table_check local-stop-at-start "$(checkpointed "$work/d")" "exit $rc"
echo "PASS: SIGTERM while the ranks start -> held, checkpoint after the first step, exit 3"

# (5) a second SIGTERM to the launcher, during the first step: the ranks stop at once
RAYLESS_BIN=$rayless jobs/train-local.sh -n 2 -t 1 -c configs/ci-small.toml -o "$work/e" "${slow_steps[@]}" > "$work/e.log" 2>&1 &
pid=$!
wait_for_start "$work/e.log" || { cat "$work/e.log"; fail "no start line"; }
kill -TERM "$pid"
sleep 0.3  # two kills at once merge into one while pending
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
cat "$work/e.log"
grep -q "second SIGTERM" "$work/e.log" || fail "the launcher did not take a second SIGTERM"
signal_table_check local-twice "$(checkpointed "$work/e")" "exit $rc"
echo "PASS: a second SIGTERM to train-local.sh -> stopped at once, exit $rc"

# (6) plain mpirun forwards SIGUSR1
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/f" "${long[@]}" \
  > "$work/f.log" 2>&1 &
pid=$!
wait_for_step "$work/f" || { cat "$work/f.log"; fail "no first step"; }
kill -USR1 "$pid"
wait "$pid"
rc=$?
pid=""
grep -q "SIGUSR1 received: checkpointing" "$work/f.log" || { cat "$work/f.log"; fail "mpirun + SIGUSR1: no checkpointing line"; }
signal_table_check mpirun-usr1 "$(checkpointed "$work/f")" "exit $rc"
echo "PASS: plain mpirun + SIGUSR1 -> checkpoint, exit 3"

# (7) plain mpirun answers SIGTERM by killing the ranks a second later: during a long first step,
# no checkpoint
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/g" "${slow_steps[@]}" \
  > "$work/g.log" 2>&1 &
pid=$!
wait_for_start "$work/g.log" || { cat "$work/g.log"; fail "no start line"; }
kill -TERM "$pid"
wait "$pid"
rc=$?
pid=""
cat "$work/g.log"
signal_table_check mpirun-term "$(checkpointed "$work/g")" "exit $rc"
echo "PASS: plain mpirun + SIGTERM -> ranks killed, exit $rc"
