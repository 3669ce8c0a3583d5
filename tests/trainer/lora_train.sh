#!/usr/bin/env bash
# LoRA end to end (`rayless train` with lora.enabled at 2 ranks):
#  1. the checkpoint is PEFT's files (adapter_config.json + adapter_model.safetensors), no whole model;
#     with beta > 0 the reference is the base with adapters off: kl is exactly 0 at step 1 (B = 0, the
#     adapted model is the base) and positive at every later step;
#  2. ZeRO: zero_stage 1 and 2 give stage 0's adapter byte for byte (float32, 2 ranks, no accumulation),
#     and within 1e-12 in float64 with gradient accumulation and clipping;
#  3. resume is exact (SIGTERM mid-cycle, --resume auto: adapter_model.safetensors identical);
#  4. bad settings exit 2 with one line: a target that matches no layer, lora.r = 0, resuming a LoRA
#     checkpoint without LoRA (and a whole-model checkpoint with it).
# usage: lora_train.sh RAYLESS TRAIN_UNTIL_SIGNAL
set -uo pipefail
rayless=$1; until_signal=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-lora.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
lora=(--config configs/ci-small.toml --set lora.enabled=true --set lora.r=4 --set lora.alpha=8
      --set 'lora.target_modules=["all-linear"]' --set optim.learning_rate=1e-2 --set checkpoint.save_steps=2)
train() {  # OUTPUT [args...]
  local out=$1; shift
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --output "$out" "$@" > "$out.log" 2>&1 \
    || { cat "$out.log"; fail "training $out"; }
}

# 1. checkpoint format and the reference model
# (μ = 1, one micro-batch per generation: the policy that generated is the one that trains, so a
# reference that were the adapted policy itself would give kl = 0 at every step)
train "$work/kl" "${lora[@]}" --set grpo.beta=0.04 --set grpo.num_iterations=1 --set grpo.steps_per_generation=1
grep -q "LoRA r=4 on 28 layers" "$work/kl.log" || { head -3 "$work/kl.log"; fail "start line does not name the adapters"; }
ckpt="$work/kl/checkpoints/$(cat "$work/kl/checkpoints/latest")"
[ -f "$ckpt/adapter_config.json" ] && [ -f "$ckpt/adapter_model.safetensors" ] && [ ! -e "$ckpt/model.safetensors" ] \
  || { ls "$ckpt"; fail "a LoRA checkpoint holds PEFT's two files and no whole model"; }
/usr/bin/python3 - "$work/kl/metrics.jsonl" <<'PY' || exit 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kl = [r["kl"] for r in rows]
assert kl[0] == 0.0, f"kl at step 1 must be exactly 0 (adapters start at B = 0), got {kl}"
assert min(kl[1:]) > 0, f"kl must be positive once the adapters train, got {kl}"
print("PASS: kl", kl, "(0 at step 1: the reference is the base with adapters off)")
PY

# 2. ZeRO-2 trains the adapters as stage 0 does
train "$work/z0" "${lora[@]}" --set distributed.zero_stage=0
train "$work/z1" "${lora[@]}" --set distributed.zero_stage=1
train "$work/z2" "${lora[@]}" --set distributed.zero_stage=2
cmp "$work/z0/checkpoints/step-00000004/adapter_model.safetensors" "$work/z1/checkpoints/step-00000004/adapter_model.safetensors" \
  && echo "PASS: zero_stage 1 adapter identical to stage 0's after 4 steps" || fail "LoRA at zero_stage 1 differs from stage 0"
cmp "$work/z0/checkpoints/step-00000004/adapter_model.safetensors" "$work/z2/checkpoints/step-00000004/adapter_model.safetensors" \
  && echo "PASS: zero_stage 2 adapter identical to stage 0's after 4 steps" || fail "LoRA at zero_stage 2 differs from stage 0"
cmp -s "$work/z0/checkpoints/step-00000002/adapter_model.safetensors" "$work/z0/checkpoints/step-00000004/adapter_model.safetensors" \
  && fail "the adapters did not change between step 2 and step 4"

# ... and with gradient accumulation (stage 2 averages each micro-step: float64, within 1e-12)
for stage in 0 1 2; do
  train "$work/ga$stage" "${lora[@]}" --set model.dtype=float64 --set train.gradient_accumulation_steps=2 \
    --set train.max_steps=3 --set optim.max_grad_norm=0.05 --set checkpoint.save_steps=0 --set distributed.zero_stage=$stage
done
for stage in 1 2; do
  /usr/bin/python3 "$src/tests/trainer/compare_weights.py" "$work/ga0/checkpoints/step-00000003/adapter_model.safetensors" \
    "$work/ga$stage/checkpoints/step-00000003/adapter_model.safetensors" \
    --label " LoRA, float64, accumulation 2, clipping: zero_stage $stage vs 0" || exit 1
done

# 3. resume exact
mpirun -np 2 --oversubscribe --bind-to none "$until_signal" --signal-at-micro-step 3 --output "$work/r" "${lora[@]}" \
  > "$work/r1.log" 2>&1
[ $? -eq 3 ] || { cat "$work/r1.log"; fail "signal run"; }
train "$work/r" "${lora[@]}" --resume auto
grep -q "resumed from" "$work/r.log" || fail "did not resume"
cmp "$work/z0/checkpoints/step-00000004/adapter_model.safetensors" "$work/r/checkpoints/step-00000004/adapter_model.safetensors" \
  && echo "PASS: LoRA run resumed after SIGTERM at micro-step 3 ends with the uninterrupted adapter" || fail "resumed adapter differs"

# 4. bad settings: one line, exit 2
expect_exit2() {  # PATTERN ARGS...
  local pattern=$1; shift
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train "$@" > "$work/bad.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c 'rayless: error:' "$work/bad.log")" -eq 1 ] && grep -q "$pattern" "$work/bad.log" \
    || { cat "$work/bad.log"; fail "expected exit 2 with '$pattern', got $rc"; }
  echo "PASS: $(grep 'rayless: error:' "$work/bad.log")"
}
expect_exit2 'lora.target_modules: "qkv" matches no linear layer' "${lora[@]}" --set 'lora.target_modules=["qkv"]' --output "$work/bad1"
expect_exit2 'lora.r = 0 (an integer) is not allowed' "${lora[@]}" --set lora.r=0 --output "$work/bad2"
expect_exit2 'holds a LoRA adapter (adapter_config.json), not a whole model: resume it with lora.enabled = true' \
  --config configs/ci-small.toml --set checkpoint.save_steps=2 --output "$work/z0" --resume auto --set train.max_steps=6
train "$work/whole" --config configs/ci-small.toml --set train.max_steps=2 --set checkpoint.save_steps=2
expect_exit2 'holds a whole model, not a LoRA adapter: resume it with lora.enabled = false' \
  "${lora[@]}" --output "$work/whole" --resume auto
