#!/usr/bin/env bash
# A ZeRO-2 checkpoint is world-size and stage independent: float64 runs (μ = 2, one micro-batch per
# generation, so step 2 ends a generation cycle) at 2 ranks, one at
# zero_stage 2 and one at stage 0, checkpoint at step 2. Each is
# resumed to step 4 at 1 rank and at 3 ranks, at stage 2 and at stage 0, crosswise; every resumed
# run must equal stage 0 resuming stage 0's checkpoint (torch AdamW throughout) within 1e-12 relative. A checkpoint taken between optimizer steps at stage 2 (gradient slices) is refused at
# stage 0 with exit 2 naming the stages.
# usage: zero_resume_world_sizes.sh RAYLESS TRAIN_UNTIL_SIGNAL
set -uo pipefail
rayless=$1; until_signal=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-zero-resume.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
compare="/usr/bin/python3 $src/tests/trainer/compare_weights.py"
common=(--config configs/ci-small.toml --set model.dtype=float64 --set grpo.steps_per_generation=1 --set optim.weight_decay=0.1
        --set optim.max_grad_norm=0.05 --set checkpoint.save_steps=2)
fail() { echo "FAIL: $*"; exit 1; }
train() {  # NP OUTPUT [--set ...]
  local np=$1 out=$2; shift 2
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "${common[@]}" --output "$out" "$@" > "$out.log" 2>&1 \
    || { cat "$out.log"; fail "np $np $out"; }
}
for stage in 2 0; do
  train 2 "$work/from$stage" --set train.max_steps=2 --set distributed.zero_stage=$stage
done
$compare "$work/from2/checkpoints/step-00000002/model.safetensors" "$work/from0/checkpoints/step-00000002/model.safetensors" \
  --label " step 2 at 2 ranks, stage 2 vs stage 0" || exit 1
for np in 1 3; do
  for stage in 2 0; do
    for from in 2 0; do
      out="$work/np$np-stage$stage-from$from"
      cp -r "$work/from$from" "$out"
      train "$np" "$out" --set train.max_steps=4 --set distributed.zero_stage=$stage --resume auto
      grep -q "resumed from .*step-00000002" "$out.log" || { cat "$out.log"; fail "$out did not resume from step 2"; }
    done
  done
  # the reference: stage 0's own checkpoint resumed by stage 0 (torch AdamW throughout)
  for run in stage2-from2 stage2-from0 stage0-from2; do
    $compare "$work/np$np-stage0-from0/checkpoints/step-00000004/model.safetensors" \
      "$work/np$np-$run/checkpoints/step-00000004/model.safetensors" \
      --label " resumed at $np rank(s): ${run/-from/ from the checkpoint of stage } vs stage 0 from stage 0's" || exit 1
  done
done

# between optimizer steps: the gradient slices of stage 2 do not convert
mpirun -np 2 --oversubscribe --bind-to none "$until_signal" --signal-at-micro-step 3 --config configs/ci-small.toml \
  --set train.gradient_accumulation_steps=2 --set grpo.num_iterations=1 --set grpo.steps_per_generation=2 \
  --set distributed.zero_stage=2 --output "$work/mid" > "$work/mid.log" 2>&1
[ $? -eq 3 ] || { cat "$work/mid.log"; fail "signal run"; }
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml \
  --set train.gradient_accumulation_steps=2 --set grpo.num_iterations=1 --set grpo.steps_per_generation=2 \
  --output "$work/mid" --resume auto > "$work/mid2.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "taken between optimizer steps with distributed.zero_stage = 2; resume it with zero_stage 2 (now 0)" "$work/mid2.log" \
  || { cat "$work/mid2.log"; fail "stage-2 mid-accumulation checkpoint resumed at stage 0: exit $rc, expected 2"; }
echo "PASS: a stage-2 checkpoint between optimizer steps is refused at stage 0: $(grep 'rayless: error' "$work/mid2.log" | head -1)"
