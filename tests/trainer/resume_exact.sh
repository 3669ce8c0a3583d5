#!/usr/bin/env bash
# Resume must be exact: a run interrupted by SIGTERM after micro-step K and resumed with
# --resume auto ends with the same model.safetensors, byte for byte, as an uninterrupted run.
# usage: resume_exact.sh RAYLESS TRAIN_UNTIL_SIGNAL NP K [--set k=v ...]
# (TRAIN_UNTIL_SIGNAL: tests/trainer/programs/train_until_signal.cpp, `rayless train` that raises the
# signal itself after micro-step K)
set -uo pipefail
rayless=$1; until_signal=$2; np=$3; k=$4; shift 4
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-resume.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
run() { mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml "$@"; }

run --output "$work/straight" "$@" > "$work/straight.log" 2>&1 || { cat "$work/straight.log"; echo "FAIL: uninterrupted run"; exit 1; }
mpirun -np "$np" --oversubscribe --bind-to none "$until_signal" --signal-at-micro-step "$k" \
  --config configs/ci-small.toml --output "$work/resumed" "$@" > "$work/first.log" 2>&1
rc=$?
cat "$work/first.log"
[ $rc -eq 3 ] || { echo "FAIL: interrupted run exited $rc, expected 3 (checkpointed on signal)"; exit 1; }
run --output "$work/resumed" --resume auto "$@" > "$work/second.log" 2>&1 || { cat "$work/second.log"; echo "FAIL: resumed run"; exit 1; }
cat "$work/second.log"
grep -q "resumed from" "$work/second.log" || { echo "FAIL: the second run did not resume"; exit 1; }
a=$(cat "$work/straight/checkpoints/latest"); b=$(cat "$work/resumed/checkpoints/latest")
[ "$a" = "$b" ] || { echo "FAIL: latest checkpoints differ: $a vs $b"; exit 1; }
if cmp "$work/straight/checkpoints/$a/model.safetensors" "$work/resumed/checkpoints/$b/model.safetensors"; then
  echo "PASS: $a/model.safetensors identical after SIGTERM at micro-step $k and --resume auto"
else
  echo "FAIL: parameters differ after resume"; exit 1
fi
# every step logged exactly once
python3 - "$work/resumed/metrics.jsonl" <<'PY' || exit 1
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if l.strip()]
assert steps == list(range(1, len(steps) + 1)), steps
print("PASS: metrics.jsonl steps", steps)
PY
