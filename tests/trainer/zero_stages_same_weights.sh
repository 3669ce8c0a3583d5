#!/usr/bin/env bash
# ZeRO stages 0, 1 and 2 train the same model: `rayless train` at NP ranks, float64, 3 optimizer
# steps with μ = 2, gradient accumulation 2, clipping active (max_grad_norm 0.05 against norms of
# 0.4-1.5) and weight decay, 1 MiB buckets (the tiny model's 3M float64 weights span 24 buckets, cut
# through tensors). The weights after step 3 agree within 1e-12 relative, every logged reward is
# equal and grad_norm agrees within 1e-12. Float32 (NP >= 2): see below.
# usage: zero_stages_same_weights.sh RAYLESS NP
set -uo pipefail
rayless=$1; np=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-zero.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
compare="/usr/bin/python3 $src/tests/trainer/compare_weights.py"
common=(--config configs/ci-small.toml --set train.max_steps=3 --set train.gradient_accumulation_steps=2
        --set optim.max_grad_norm=0.05 --set optim.weight_decay=0.1 --set distributed.bucket_size_mb=1
        --set checkpoint.save_steps=0)
train() {  # NAME DTYPE STAGE
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${common[@]}" --set model.dtype="$2" \
    --set distributed.zero_stage="$3" --output "$work/$1" > "$work/$1.log" 2>&1 \
    || { cat "$work/$1.log"; echo "FAIL: $1 (np $np, $2, zero_stage $3)"; exit 1; }
}
weights() { echo "$work/$1/checkpoints/step-00000003/model.safetensors"; }

for stage in 0 1 2; do train "f64-stage$stage" float64 $stage; done
for stage in 1 2; do
  $compare "$(weights f64-stage0)" "$(weights f64-stage$stage)" --tolerance 1e-12 --label " np $np float64 stage $stage vs 0" || exit 1
done
/usr/bin/python3 - "$work" <<'PY' || exit 1
import json, sys
runs = {s: [json.loads(l) for l in open(f"{sys.argv[1]}/f64-stage{s}/metrics.jsonl")] for s in (0, 1, 2)}
rewards = lambda run: [(m["step"], m["reward"]) for m in run if "reward" in m]  # the steps that generated
assert len(rewards(runs[0])) == 2, rewards(runs[0])
for s in (1, 2):
    assert rewards(runs[s]) == rewards(runs[0]), (s, rewards(runs[s]), rewards(runs[0]))
    for a, b in zip(runs[0], runs[s]):
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-12 * abs(a["grad_norm"]), (s, a["step"], a["grad_norm"], b["grad_norm"])
        assert b["memory/optimizer_state_mb"] <= a["memory/optimizer_state_mb"]
    print(f"PASS: stage {s}: rewards {rewards(runs[s])} equal to stage 0's; grad_norm within 1e-12;"
          f" optimizer state {runs[s][-1]['memory/optimizer_state_mb']:.2f} MB vs {runs[0][-1]['memory/optimizer_state_mb']:.2f} MB,"
          f" gradients {runs[s][-1]['memory/gradients_mb']:.2f} MB vs {runs[0][-1]['memory/gradients_mb']:.2f} MB")
PY
# float32: at 2 ranks the stages sum the same two numbers in every reduction and AdamW runs the same
# elementwise operations, so stage 1 is bit-identical to stage 0, and so is stage 2 when each step is
# one micro-step (with accumulation, stage 2 averages each micro-step before summing: 1e-6 absolute,
# a thousandth of one step's largest update at lr 1e-3). At 3-4 ranks MPI's reduction order differs.
if [ "$np" -ge 2 ]; then
  for stage in 0 1 2; do train "f32-stage$stage" float32 $stage; done
  same_bits() {  # A B LABEL
    cmp -s "$(weights "$1")" "$(weights "$2")" && echo "PASS np $np float32 $3: bit-identical weights" \
      || { echo "FAIL np $np float32 $3: weights differ"; exit 1; }
  }
  if [ "$np" -eq 2 ]; then same_bits f32-stage0 f32-stage1 "stage 1 vs 0"; else
    $compare "$(weights f32-stage0)" "$(weights f32-stage1)" --absolute 1e-6 --label " np $np float32 stage 1 vs 0" || exit 1
  fi
  $compare "$(weights f32-stage0)" "$(weights f32-stage2)" --absolute 1e-6 --label " np $np float32 stage 2 vs 0" || exit 1
  if [ "$np" -eq 2 ]; then
    common+=(--set train.gradient_accumulation_steps=1)
    train f32-ga1-stage0 float32 0
    train f32-ga1-stage2 float32 2
    same_bits f32-ga1-stage0 f32-ga1-stage2 "stage 2 vs 0 without accumulation"
  fi
fi
