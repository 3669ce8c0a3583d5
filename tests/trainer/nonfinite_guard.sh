#!/usr/bin/env bash
# The guard against non-finite steps (issue 51 §3), end to end on 2 ranks, a generation per step:
#  1. a loss forced to infinity on rank 1 only (the test program's hook; ZeRO-1, so each rank updates
#     its own shard): the step is not applied on any rank (its checkpoint's model and optimizer.pt equal
#     the step before's), the schedule is untouched (the next step's learning rate is the reference
#     run's at that count), train/nonfinite_steps counts it, a warning names the loss and the step's
#     rows; the run goes on (exit 0). With train.max_nonfinite_steps = 1 it stops: exit 4, one line
#     naming the last checkpoint, which is whole and finite; nothing of that step written.
#  2. optim.learning_rate = 1e30: the second generation's logits are not finite (before the guard the
#     sampler died in LibTorch's multinomial); 3 steps in a row skipped, exit 4, every checkpoint
#     finite and equal to step 1's. 2b: the same with a generation rank (np 3): its marks travel to
#     the training ranks.
#  3. optim.learning_rate = 1e39: the update itself is not finite; the checkpoint is refused (exit 4),
#     none is written.
#  4. a reward worker returning +-1e308 (infinite in float32): warned with the row, the step not
#     applied ("rewards"), the stored advantages TRL's (NaN made 0).
# usage: nonfinite_guard.sh RAYLESS TRAIN_UNTIL_SIGNAL
set -uo pipefail
rayless=$1
until_signal=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-nonfinite.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--config configs/ci-small.toml --set grpo.num_iterations=1 --set grpo.steps_per_generation=1
        --set checkpoint.save_steps=1 --set checkpoint.keep_last=10)
mpi() { mpirun -np 2 --oversubscribe --bind-to none "$@"; }
# every tensor of every model.safetensors under $1 finite
all_finite() {
  python3 - "$1" <<'PY'
import glob, json, struct, sys
import numpy as np
files = glob.glob(sys.argv[1] + "/checkpoints/step-*/model.safetensors")
assert files, "no checkpoint"
for path in files:
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        values = np.frombuffer(blob[8 + n + a:8 + n + b], dtype=np.float32)
        assert np.isfinite(values).all(), f"{path}: {name} is not finite"
print(f"{len(files)} checkpoints, every tensor finite")
PY
}
metric() {  # metric RUN STEP KEY
  python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]; print([x for x in r if x['step']==int(sys.argv[2])][0].get(sys.argv[3]))" "$1/metrics.jsonl" "$2" "$3"
}

# 1. an infinite loss on one rank
mpi "$rayless" train "${common[@]}" --output "$work/ref" --set train.max_steps=5 --set distributed.zero_stage=1 \
  > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run"; }
mpi "$until_signal" "${common[@]}" --output "$work/inf" --set train.max_steps=5 --set distributed.zero_stage=1 \
  --inf-loss-at-micro-step 2 --inf-loss-rank 1 > "$work/inf.log" 2>&1 || { cat "$work/inf.log"; fail "a run with one infinite loss stopped"; }
grep -q "rayless: warning: step 3 not applied: not finite: loss, grad_norm (grad_norm nan); weights, AdamW state and learning-rate schedule unchanged (1 in a row, 1 in all; train.max_nonfinite_steps = 3); no row marked; the step's rows: prompt [0-9]* (.*data/demo/prompts.jsonl:[0-9]*) rewards \[length " "$work/inf.log" \
  || { cat "$work/inf.log"; fail "the warning must name the loss and the step's rows"; }
for f in model.safetensors optimizer.pt; do
  cmp -s "$work/inf/checkpoints/step-00000002/$f" "$work/inf/checkpoints/step-00000003/$f" \
    || fail "step 3 was not applied, yet its $f differs from step 2's"
done
cmp -s "$work/inf/checkpoints/step-00000003/model.safetensors" "$work/inf/checkpoints/step-00000004/model.safetensors" \
  && fail "step 4 should have been applied"
[ "$(metric "$work/inf" 3 loss)" = None ] || fail "step 3's loss should be null"
[ "$(metric "$work/inf" 2 train/nonfinite_steps)" = 0.0 ] && [ "$(metric "$work/inf" 5 train/nonfinite_steps)" = 1.0 ] \
  || fail "train/nonfinite_steps should go 0 -> 1"
[ "$(metric "$work/inf" 4 learning_rate)" = "$(metric "$work/ref" 3 learning_rate)" ] \
  || fail "step 4 should take the reference's 3rd learning rate ($(metric "$work/ref" 3 learning_rate)), got $(metric "$work/inf" 4 learning_rate)"
grep -q '"nonfinite_steps": 1' "$work/inf/checkpoints/step-00000005/trainer_state.json" || fail "the count is not in trainer_state.json"
echo "PASS: an infinite loss on rank 1 leaves step 3 out on both ranks (ZeRO-1 shards alike), the schedule goes on from it"

mpi "$until_signal" "${common[@]}" --output "$work/stop" --set train.max_steps=5 --set train.max_nonfinite_steps=1 \
  --inf-loss-at-micro-step 2 > "$work/stop.log" 2>&1
rc=$?
[ $rc -eq 4 ] || { cat "$work/stop.log"; fail "expected exit 4, got $rc"; }
[ "$(grep -c 'rayless: error:' "$work/stop.log")" -eq 1 ] || fail "expected one error line"
grep -q "rayless: error: 1 non-finite steps in a row (steps 3-3; train.max_nonfinite_steps = 1): stopped without applying them; the last checkpoint, $work/stop/checkpoints/step-00000002, is whole and finite" "$work/stop.log" \
  || { cat "$work/stop.log"; fail "the error line must name the limit and the last checkpoint"; }
[ "$(cat "$work/stop/checkpoints/latest")" = step-00000002 ] && [ ! -e "$work/stop/checkpoints/step-00000003" ] \
  || fail "the last checkpoint must be step 2's"
cmp -s "$work/stop/checkpoints/step-00000002/model.safetensors" "$work/inf/checkpoints/step-00000002/model.safetensors" \
  || fail "step 2's weights differ from the other run's"
echo "PASS: train.max_nonfinite_steps = 1 stops at the first one: exit 4, $(grep 'rayless: error:' "$work/stop.log" | cut -c1-120)..."

# 2. learning rate 1e30
mpi "$rayless" train "${common[@]}" --output "$work/lr30" --set optim.learning_rate=1e30 --set train.max_steps=8 \
  > "$work/lr30.log" 2>&1
rc=$?
[ $rc -eq 4 ] || { cat "$work/lr30.log"; fail "lr 1e30: expected exit 4, got $rc"; }
grep -q "rayless: warning: generation 1: the logits of [0-9]* of 4 rows held a NaN or an infinity" "$work/lr30.log" \
  || { cat "$work/lr30.log"; fail "the sampler's non-finite logits were not named"; }
grep -q "step 2 not applied: not finite: logits in generation" "$work/lr30.log" || fail "step 2 should be left out for its logits"
grep -q "rayless: error: 3 non-finite steps in a row (steps 2-4; train.max_nonfinite_steps = 3)" "$work/lr30.log" || fail "lr 1e30: the stop line"
! grep -q "probability tensor\|frame #" "$work/lr30.log" || fail "LibTorch's words reached the user"
all_finite "$work/lr30" || fail "a checkpoint holds a non-finite tensor"
for s in 2 3; do cmp -s "$work/lr30/checkpoints/step-00000001/model.safetensors" "$work/lr30/checkpoints/step-0000000$s/model.safetensors" \
  || fail "step $s changed the weights"; done
echo "PASS: learning rate 1e30: non-finite logits caught in generation, 3 steps left out, exit 4, checkpoints finite"

# 2b. the same with a generation rank (issue 49): its sampler's marks reach the training ranks
mpirun -np 3 --oversubscribe --bind-to none "$rayless" train "${common[@]}" --output "$work/lr30-async" \
  --set optim.learning_rate=1e30 --set train.max_steps=8 --set distributed.generation_ranks=1 > "$work/lr30-async.log" 2>&1
rc=$?
[ $rc -eq 4 ] || { cat "$work/lr30-async.log"; fail "lr 1e30, a generation rank: expected exit 4, got $rc"; }
grep -q "rayless: warning: generation 1: the logits of [0-9]* of 4 rows held a NaN or an infinity" "$work/lr30-async.log" \
  || { cat "$work/lr30-async.log"; fail "a generation rank's non-finite logits did not reach the training ranks"; }
grep -q "step 2 not applied: not finite: logits in generation" "$work/lr30-async.log" || fail "a generation rank: step 2 should be left out"
all_finite "$work/lr30-async" || fail "a generation rank: a checkpoint holds a non-finite tensor"
/usr/bin/python3 - "$work/lr30-async/rollouts/generated" <<'PY' || fail "rollouts/generated/ does not mark the rows"  # h5py: Debian's
import glob, sys
import h5py
marked = 0
for path in glob.glob(sys.argv[1] + "/rank-*/step-*.h5"):
    with h5py.File(path) as f:
        for group in f.values():
            marked += int(group["nonfinite_logits"][()].sum())
assert marked > 0, "no row marked"
print(f"rollouts/generated/: {marked} rows marked nonfinite_logits")
PY
echo "PASS: learning rate 1e30 with a generation rank: its non-finite logits leave step 2 out on the training ranks"

# 3. learning rate 1e39: the update overflows; no checkpoint with it
mpi "$rayless" train "${common[@]}" --output "$work/lr39" --set optim.learning_rate=1e39 --set train.max_steps=4 \
  > "$work/lr39.log" 2>&1
rc=$?
[ $rc -eq 4 ] && [ "$(grep -c 'rayless: error:' "$work/lr39.log")" -eq 1 ] || { cat "$work/lr39.log"; fail "lr 1e39: expected exit 4 and one line, got $rc"; }
grep -q "rayless: error: checkpoint at step 1 (micro-step 1) not written: the model's .* is not finite; the last checkpoint, none yet, is whole and finite" "$work/lr39.log" \
  || { cat "$work/lr39.log"; fail "lr 1e39: the refusal line"; }
[ -z "$(ls "$work/lr39/checkpoints" 2>/dev/null | grep -v '^\.')" ] || fail "lr 1e39: a checkpoint was written: $(ls "$work/lr39/checkpoints")"
echo "PASS: learning rate 1e39: the checkpoint with infinite weights is refused, exit 4"

# 4. a worker's +-1e308 rewards
cat > "$work/huge.py" <<'PY'
import json, sys
for i, line in enumerate(sys.stdin):
    print(json.dumps({"reward": 1e308 if i % 2 == 0 else -1e308}), flush=True)
PY
mpi "$rayless" train "${common[@]}" --output "$work/huge" --set train.max_steps=2 --set 'reward.functions=["huge"]' \
  --set "reward.workers.huge.command=\"python3 $work/huge.py\"" > "$work/huge.log" 2>&1 || { cat "$work/huge.log"; fail "huge rewards run"; }
grep -q "rayless: warning: reward huge of completion 0 (prompt [0-9]* (.*data/demo/prompts.jsonl:[0-9]*)) is 1e+308: infinite in float32, as TRL holds rewards" "$work/huge.log" \
  || { cat "$work/huge.log"; fail "the huge reward was not named with its row"; }
grep -q "step 1 not applied: not finite: rewards" "$work/huge.log" || fail "the step with infinite rewards was applied"
"$rayless" inspect "$work/huge" --export jsonl -o "$work/huge.jsonl" || fail "inspect"
python3 - "$work/huge.jsonl" <<'PY' || fail "stored advantages are not TRL's (NaN made 0)"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert rows and all(r["advantage"] == 0.0 for r in rows), [r["advantage"] for r in rows]
PY
all_finite "$work/huge" || fail "a checkpoint holds a non-finite tensor"
echo "PASS: rewards of +-1e308 from a worker: named with their rows, the steps left out, advantages zero as TRL's"
