#!/usr/bin/env bash
# tools/bench/compare.py's equal-settings table, without running anything (--dry-run): every knob TRL
# and rayless are given must read the same in both columns except the deliberate differences, and the
# scenarios with gradient checkpointing on must show it on for both tools (TRL defaults to on), and the
# -bf16 scenarios bfloat16 autocast on for both (off for both elsewhere).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(python3 "$root/tools/bench/compare.py" run --dry-run --rayless /nonexistent --out "$(mktemp -d)")
fail() { echo "FAIL: $*"; echo "$out" | grep -E "DIFFERS|gradient checkpointing" || true; exit 1; }
if grep -q "DIFFERS" <<< "$out"; then fail "a knob differs between TRL and rayless"; fi
grep -qE "^\| small-256-mu1-gc \| gradient checkpointing \| true \| true \|" <<< "$out" ||
  fail "small-256-mu1-gc must run both tools with gradient checkpointing on"
grep -qE "^\| small-256-mu1 \| gradient checkpointing \| false \| false \|" <<< "$out" ||
  fail "small-256-mu1 must run both tools with gradient checkpointing off"
grep -qE "^\| small-256-mu1-bf16 \| bf16 autocast \| true \| true \|" <<< "$out" ||
  fail "small-256-mu1-bf16 must run both tools with bf16 autocast on"
grep -qE "^\| small-256-mu1 \| bf16 autocast \| false \| false \|" <<< "$out" ||
  fail "small-256-mu1 must run both tools with bf16 autocast off"
grep -qE "^\| all \| dtype \| float32 \| float32 \|" <<< "$out" || fail "dtype must be float32 for both"
echo "compare.py --dry-run: every knob equal or a deliberate difference; checkpointing and bf16 on/off in both tools"
