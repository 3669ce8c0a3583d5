#!/usr/bin/env bash
# The data order is global: a run resumed at other world sizes draws every prompt exactly once per
# epoch and continues the epoch's order where it stopped.
#  (a) grpo.generation_batch_size fixed (the global batch does not change with the ranks): 2 -> 3 -> 1
#      ranks draw the same prompts, step for step, as an uninterrupted run.
#  (b) TRL's per-device sizes (the global batch grows with the ranks): 2 -> 1 -> 3 -> 2 ranks draw
#      the epochs' order without a gap or a repeat: the same sequence of prompts as (a).
# (Written when a resume at another world size counted steps and cursor with the new batch size:
# prompts of earlier steps drawn again within the epoch, others never.)
# usage: data_order_world_sizes.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-order.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
for i in $(seq 0 23); do printf '{"prompt": "prompt %02d:"}\n' "$i"; done > "$work/prompts.jsonl"
common=(--config configs/ci-small.toml --set "data.path=\"$work/prompts.jsonl\"" --set grpo.num_generations=2
        --set grpo.num_iterations=1 --set train.per_device_train_batch_size=2 --set generation.max_completion_length=3
        --set checkpoint.save_steps=0 --set log.console=false)
fixed=(--set grpo.steps_per_generation=0 --set grpo.generation_batch_size=12)  # 6 prompts per step, any world size
train() {  # NAME RANKS MAX_STEPS ARGS...
  local name=$1 np=$2 steps=$3; shift 3
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${common[@]}" --output "$work/$name" \
    --set "train.max_steps=$steps" "$@" > "$work/$name-$np-$steps.log" 2>&1 \
    || { cat "$work/$name-$np-$steps.log"; fail "$name: $np ranks to step $steps"; }
}
# one line per generation step: its prompts, in the order of the global batch (ranks in order)
prompts_by_step() {
  "$rayless" inspect "$work/$1" --export jsonl -o "$work/$1.jsonl" > /dev/null || fail "inspect $1"
  python3 - "$work/$1.jsonl" <<'PY'
import json, sys
rows = sorted((r["step"], r["rank"], r["index"], r["group"]) for r in map(json.loads, open(sys.argv[1])))
steps = {}
for step, _, _, group in rows:
    prompts = steps.setdefault(step, [])
    if not prompts or prompts[-1] != group:  # a group's completions are consecutive
        prompts.append(group)
assert sorted(steps) == list(range(len(steps))), f"generation steps {sorted(steps)}"
for step in sorted(steps):
    print(" ".join(map(str, steps[step])))
PY
}

# (a) the global batch unchanged: 6 prompts per generation at 2, 3 and 1 ranks (3, 2, 6 micro-steps)
train straight 2 24 "${fixed[@]}"
train resumed 2 6 "${fixed[@]}"
train resumed 3 12 "${fixed[@]}" --resume auto
train resumed 1 30 "${fixed[@]}" --resume auto
prompts_by_step straight > "$work/straight.txt" || exit 1
prompts_by_step resumed > "$work/resumed.txt" || exit 1
paste -d '|' "$work/straight.txt" "$work/resumed.txt" | sed 's/|/   |   /; s/^/    /'
cmp -s "$work/straight.txt" "$work/resumed.txt" || fail "(a) 2 -> 3 -> 1 ranks drew other prompts than the uninterrupted run"
python3 - "$work/straight.txt" <<'PY' || fail "(a) an epoch does not hold every prompt exactly once"
import sys
steps = [line.split() for line in open(sys.argv[1])]
for epoch in range(2):
    drawn = [p for s in steps[4 * epoch:4 * epoch + 4] for p in s]
    assert sorted(map(int, drawn)) == list(range(24)), (epoch, drawn)
PY
echo "PASS: (a) 8 generations of 6 prompts at 2 -> 3 -> 1 ranks equal the uninterrupted run's; each epoch draws all 24 once"

# (b) TRL's per-device sizes: 4, 2, 6 and 4 prompts per generation at 2, 1, 3 and 2 ranks
train perdevice 2 4
train perdevice 1 8 --resume auto
train perdevice 3 12 --resume auto
train perdevice 2 14 --resume auto
prompts_by_step perdevice > "$work/perdevice.txt" || exit 1
sed 's/^/    /' "$work/perdevice.txt"
[ "$(tr '\n' ' ' < "$work/perdevice.txt" | wc -w)" = 28 ] || fail "(b) expected 4+4+2+2+6+6+4 prompts"
[ "$(tr '\n' ' ' < "$work/perdevice.txt" | xargs)" = "$(tr '\n' ' ' < "$work/straight.txt" | cut -d' ' -f1-28 | xargs)" ] \
  || fail "(b) 2 -> 1 -> 3 -> 2 ranks did not continue the epochs' order (the first 28 prompts of (a))"
echo "PASS: (b) 2 -> 1 -> 3 -> 2 ranks with per-device batches draw the epochs' order without a gap or a repeat"
