#!/usr/bin/env bash
# Small gaps: `generate` refuses sampling flags the config refuses (--top-p 1.5); model.dtype =
# "float16" on a machine whose device resolves to the CPU stops with exit 2; `inspect` labels the
# completion length apart from the length reward.
# usage: small_gaps.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-gaps.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
"$rayless" generate --model configs/models/tiny --tokenizer byte --prompt hi --top-p 1.5 > "$work/g.log" 2>&1
rc=$?
cat "$work/g.log"
[ $rc -eq 2 ] && grep -q "rayless: error: generate: --top-p 1.5 is not allowed: expected .*(as generation.top_p)" "$work/g.log" || fail "--top-p 1.5: exit $rc"
"$rayless" generate --model configs/models/tiny --tokenizer byte --prompt hi --top-k -1 > "$work/k.log" 2>&1
[ $? -eq 2 ] || { cat "$work/k.log"; fail "--top-k -1 accepted"; }
echo "PASS: generate refuses --top-p 1.5 and --top-k -1"

"$rayless" train --config configs/ci-small.toml --output "$work/f16" --set model.dtype=float16 --set model.device=auto \
  > "$work/f.log" 2>&1
rc=$?
cat "$work/f.log"
[ $rc -eq 2 ] && grep -q 'model.dtype = "float16" is for GPUs only' "$work/f.log" || fail "float16 on the CPU: exit $rc"
echo "PASS: float16 on a CPU device -> exit 2"

"$rayless" train --config configs/ci-small.toml --output "$work/run" --set train.max_steps=1 > "$work/t.log" 2>&1 \
  || { cat "$work/t.log"; fail "train"; }
"$rayless" inspect "$work/run" > "$work/i.log" 2>&1 || { cat "$work/i.log"; fail "inspect"; }
cat "$work/i.log"
grep -q "| reward length .* | completion tokens mean" "$work/i.log" || fail "inspect must label the length reward and the completion length apart"
echo "PASS: inspect labels 'reward length' and 'completion tokens'"
