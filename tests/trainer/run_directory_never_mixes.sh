#!/usr/bin/env bash
# One run per directory: a new run where a run is (metrics, checkpoints, rollouts) stops with exit 2
# and touches nothing; --resume auto continues it; --overwrite moves it to DIR.replaced-<time> and
# starts clean; --resume auto where nothing is starts fresh and says so, and where a run without a
# checkpoint is (stopped before its first), moves it aside and starts from the beginning. (Written when a second run appended steps 1, 2 to the first's
# metrics.jsonl and left its checkpoints beside.)
# usage: run_directory_never_mixes.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-rundir.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
common=(--config configs/ci-small.toml --set grpo.num_iterations=1 --set grpo.steps_per_generation=1)
fail() { echo "FAIL: $*"; exit 1; }
steps_of() { /usr/bin/python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["step"]) for l in open(sys.argv[1])))' "$1"; }

"$rayless" train "${common[@]}" --output "$work/run" --set train.max_steps=2 > "$work/1.log" 2>&1 || { cat "$work/1.log"; fail "first run"; }
before=$(sha256sum "$work/run/metrics.jsonl" | cut -d' ' -f1)

# a second run, no flag, at 2 ranks: every rank stops, one line, nothing touched
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train "${common[@]}" --output "$work/run" --set train.max_steps=2 \
  > "$work/2.log" 2>&1
rc=$?
cat "$work/2.log"
[ $rc -eq 2 ] || fail "a new run in a directory holding one: exit $rc, expected 2"
[ "$(grep -c 'rayless: error:' "$work/2.log")" -eq 1 ] || fail "expected exactly one error line"
grep -q "rayless: error: $work/run already holds a run (metrics.jsonl, checkpoints/, rollouts/): pass --resume auto to continue it, or --overwrite" "$work/2.log" \
  || fail "the message must say what is there and what to pass"
[ "$(sha256sum "$work/run/metrics.jsonl" | cut -d' ' -f1)" = "$before" ] || fail "metrics.jsonl changed"
echo "PASS: a new run in an occupied directory -> exit 2, metrics untouched"

# --resume auto continues it
"$rayless" train "${common[@]}" --output "$work/run" --set train.max_steps=3 --resume auto > "$work/3.log" 2>&1 \
  || { cat "$work/3.log"; fail "--resume auto"; }
[ "$(steps_of "$work/run/metrics.jsonl")" = "1 2 3" ] || fail "after --resume auto: steps $(steps_of "$work/run/metrics.jsonl")"
echo "PASS: --resume auto continues: steps 1 2 3"

# --overwrite moves the old run aside whole and starts clean
"$rayless" train "${common[@]}" --output "$work/run" --set train.max_steps=2 --overwrite > "$work/4.log" 2>&1 \
  || { cat "$work/4.log"; fail "--overwrite"; }
moved=$(ls -d "$work"/run.replaced-* 2>/dev/null)
[ "$(echo "$moved" | wc -l)" = 1 ] && [ -n "$moved" ] || fail "expected one run.replaced-* directory, got '$moved'"
grep -q "moved the old run (metrics.jsonl, checkpoints/, rollouts/) to $moved" "$work/4.log" || { cat "$work/4.log"; fail "--overwrite must say where"; }
[ "$(steps_of "$moved/metrics.jsonl")" = "1 2 3" ] || fail "the moved run lost its metrics"
[ -f "$moved/checkpoints/step-00000003/model.safetensors" ] || fail "the moved run lost its checkpoint"
[ "$(steps_of "$work/run/metrics.jsonl")" = "1 2" ] || fail "the new run's metrics: $(steps_of "$work/run/metrics.jsonl")"
[ "$(ls "$work/run/checkpoints" | grep -c '^step-')" = 1 ] || fail "the new run has checkpoints not its own: $(ls "$work/run/checkpoints")"
echo "PASS: --overwrite moved the old run to $(basename "$moved"), the new one starts at step 1"

# --resume auto in an empty directory starts fresh and says so
"$rayless" train "${common[@]}" --output "$work/empty" --set train.max_steps=1 --resume auto > "$work/5.log" 2>&1 \
  || { cat "$work/5.log"; fail "--resume auto in an empty directory"; }
grep -q "nothing to resume in $work/empty: starting fresh" "$work/5.log" || { cat "$work/5.log"; fail "must say it starts fresh"; }
echo "PASS: --resume auto with nothing there starts fresh and says so"

# --resume auto where a run left no checkpoint (stopped before its first one): moved aside, fresh start
rm -rf "$work/empty/checkpoints"
"$rayless" train "${common[@]}" --output "$work/empty" --set train.max_steps=1 --resume auto > "$work/6.log" 2>&1
rc=$?
cat "$work/6.log"
[ $rc -eq 0 ] && grep -q "holds a run (metrics.jsonl, rollouts/) stopped before its first checkpoint: moved it to $work/empty.replaced-" "$work/6.log" \
  || fail "--resume auto over a run without checkpoint: exit $rc"
moved=$(ls -d "$work"/empty.replaced-* | head -n 1)
[ -s "$moved/metrics.jsonl" ] && [ -d "$moved/rollouts" ] || fail "the interrupted run was not kept in $moved"
[ "$(steps_of "$work/empty/metrics.jsonl")" = "1" ] || fail "after the fresh start: steps $(steps_of "$work/empty/metrics.jsonl")"
echo "PASS: --resume auto over a run without a checkpoint -> moved to $moved, started from the beginning"
