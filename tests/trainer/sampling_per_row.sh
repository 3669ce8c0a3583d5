#!/usr/bin/env bash
# Sampling belongs to the row (issue 47, sampler/sampling_stream.h): a completion depends on its prompt
# and its place in the global generation batch, nothing else. The first generation (the same weights
# everywhere) must hold the same completions, row for row,
#  (a) whatever the generation engine's settings (slots, sync interval, prefill chunk), and
#  (b) at 1 and at 2 ranks with the same global batch (grpo.generation_batch_size fixed).
# (Fails on the engine before issue 47, whose generator was keyed by rank and drawn per batch.)
# usage: sampling_per_row.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-rows.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--config configs/ci-small.toml --set grpo.num_generations=2 --set grpo.num_iterations=1
        --set train.per_device_train_batch_size=2 --set grpo.steps_per_generation=0 --set grpo.generation_batch_size=12
        --set train.max_steps=1 --set checkpoint.save_steps=0 --set log.console=false
        --set generation.max_completion_length=16 --set generation.temperature=1.2)
train() {  # NAME RANKS ARGS...
  local name=$1 np=$2; shift 2
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${common[@]}" --output "$work/$name" "$@" \
    > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name: $np ranks"; }
  "$rayless" inspect "$work/$name" --export jsonl -o "$work/$name.jsonl" > /dev/null || fail "inspect $name"
}
train default-np2 2
train slots-np2 2 --set generation.slots=3 --set generation.sync_interval=4 --set generation.prefill_chunk=8
train default-np1 1
/usr/bin/python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
def first_generation(name):
    rows = [r for r in map(json.loads, open(os.path.join(work, name + ".jsonl"))) if r["step"] == 0]
    rows.sort(key=lambda r: (r["rank"], r["index"]))  # the global batch: ranks in order
    return [(r["group"], r["prompt"], r["completion"], r["truncated"]) for r in rows]
reference = first_generation("default-np2")
assert len(reference) == 12, len(reference)
assert len({c for _, _, c, _ in reference}) > 6, "the completions should differ from one another"
for name in ("slots-np2", "default-np1"):
    other = first_generation(name)
    assert len(other) == len(reference), (name, len(other))
    for i, (a, b) in enumerate(zip(reference, other)):
        assert a == b, f"{name}: global row {i}: {b} != {a}"
    print(f"PASS: {name}: the 12 completions of the first generation equal default-np2's, row for row")
PY
