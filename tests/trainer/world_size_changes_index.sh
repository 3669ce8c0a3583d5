#!/usr/bin/env bash
# A run resumed at 3 ranks, then at 1 (2 -> 3 -> 1): index.h5 links exactly the rank files that hold
# each step; `rayless inspect`, `inspect --export` and tools/read_rollouts.py read every step.
# (Written when the index linked rank_00002 for steps that rank never wrote and all three failed.)
# usage: world_size_changes_index.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-index.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--config configs/ci-small.toml --output "$work/run" --set grpo.num_iterations=1 --set grpo.steps_per_generation=1
        --set checkpoint.save_steps=2)
# checks index.h5 (ranks linked per step, every link resolves), inspect, --export and read_rollouts.py
# against "step:completions:ranks ..." (4 completions per rank and step)
check_store() {
  /usr/bin/python3 - "$work/run/rollouts/index.h5" "$1" <<'PY' || fail "index links after $2"
import sys, h5py
expected = {int(s): int(r) for s, _, r in (item.split(":") for item in sys.argv[2].split())}
with h5py.File(sys.argv[1], "r") as f:
    got = {int(k[5:]): len(f[k]) for k in f}
    print("ranks linked per step:", got)
    assert got == expected, f"expected {expected}"
    for step in f:
        for rank in f[step]:
            assert "completion_ids" in f[step][rank], (step, rank)  # every link resolves
PY
  "$rayless" inspect "$work/run" > "$work/inspect.txt" 2>&1 || { cat "$work/inspect.txt"; fail "inspect after $2"; }
  cat "$work/inspect.txt"
  local total=0 lines=0 item s n r
  for item in $1; do
    IFS=: read -r s n r <<<"$item"
    grep -q "^step $s: $n rollouts from $r rank(s)" "$work/inspect.txt" || fail "inspect after $2: step $s should have $n rollouts from $r ranks"
    total=$((total + n)); lines=$((lines + r))
  done
  "$rayless" inspect "$work/run" --export jsonl -o "$work/all.jsonl" > "$work/export.log" 2>&1 || { cat "$work/export.log"; fail "export after $2"; }
  [ "$(wc -l < "$work/all.jsonl")" = $total ] || fail "export after $2: $(wc -l < "$work/all.jsonl") rows, expected $total"
  /usr/bin/python3 tools/read_rollouts.py "$work/run/rollouts/index.h5" > "$work/read.txt" 2>&1 || { cat "$work/read.txt"; fail "read_rollouts.py after $2"; }
  [ "$(grep -c '^step ' "$work/read.txt")" = $lines ] || { cat "$work/read.txt"; fail "read_rollouts.py after $2: expected $lines (step, rank) lines"; }
  echo "PASS: after $2: index, inspect, --export ($total rows) and read_rollouts.py ($lines step-rank pairs) agree"
}
run_stage() {  # RANKS MAX_STEPS
  local extra=()
  [ "$2" = 2 ] || extra=(--resume auto)
  mpirun -np "$1" --oversubscribe --bind-to none "$rayless" train "${common[@]}" --set "train.max_steps=$2" "${extra[@]}" \
    > "$work/np$1.log" 2>&1 || { cat "$work/np$1.log"; fail "$1 ranks to step $2"; }
}
run_stage 2 2
run_stage 3 4
check_store "0:8:2 1:8:2 2:12:3 3:12:3" "2 -> 3 ranks"
run_stage 1 6
check_store "0:8:2 1:8:2 2:12:3 3:12:3 4:4:1 5:4:1" "2 -> 3 -> 1 ranks"
