#!/usr/bin/env bash
# What a resume may change (docs/hpc.md, Resuming), end to end:
#  1. settings that change the run (G, loss, model, seed, lengths) are refused in one line naming each
#     key with its old and new value and --allow-config-change; nothing in the run directory changes
#  2. harmless ones (max_steps, logging, timeouts, checkpoints) go through; config.resolved.toml stays
#     the run's first config and config.segment-<step>.toml records the new segment's
#  3. --allow-config-change KEY lets that key change; a key that is none, or the flag without
#     --resume, is refused
#  4. mid-cycle, even an allowed key is refused, naming it
#  5. --resume with --overwrite (either order) is refused before anything moves, one line at 2 ranks
#  6. a checkpoint of another architecture: one line naming the tensor, both shapes and both models
# (Written when all of these resumed silently, or failed with LibTorch's stack trace.)
# usage: resume_config_changes.sh RAYLESS TRAIN_UNTIL_SIGNAL
set -uo pipefail
rayless=$1; until_signal=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-config-changes.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--config configs/ci-small.toml --set grpo.num_iterations=1 --set grpo.steps_per_generation=1 --set log.console=false)
run="$work/run"
snapshot() { (cd "$run" && find . -type f ! -path './logs/*' -exec sha256sum {} + | sort); }
# refused NP PATTERN ARGS...: exit 2, one error line matching PATTERN, the run directory untouched
refused() {
  local np=$1 pattern=$2; shift 2
  local before; before=$(snapshot)
  mpirun -np "$np" --oversubscribe --bind-to none "$rayless" train "$@" > "$work/refused.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c 'rayless: error:' "$work/refused.log")" -eq 1 ] && grep -q -- "$pattern" "$work/refused.log" \
    || { cat "$work/refused.log"; fail "expected exit 2 and one line with '$pattern', got $rc"; }
  grep -q "frame #" "$work/refused.log" && fail "a stack trace in the message"
  [ "$before" = "$(snapshot)" ] || fail "the run directory changed"
  echo "PASS: $(grep 'rayless: error:' "$work/refused.log" | sed "s|$work/||g")"
}
ok() {  # LOG ARGS...
  local log=$1; shift
  "$rayless" train "$@" > "$work/$log" 2>&1 || { cat "$work/$log"; fail "$log"; }
}

ok first.log "${common[@]}" --output "$run" --set train.max_steps=2
cp -r configs/models/tiny "$work/tiny-copy"

# 1. settings that change the run: each named, old -> new
refused 1 'the config changes settings that change the run: .*generation.max_completion_length 12 -> 10.*grpo.loss_type "dapo" -> "grpo".*grpo.num_generations 4 -> 2.*model.path ".*/configs/models/tiny" -> ".*tiny-copy".*train.seed 7 -> 8.*pass --allow-config-change KEY' \
  "${common[@]}" --output "$run" --resume auto --set train.max_steps=3 --set grpo.num_generations=2 \
  --set grpo.loss_type=grpo --set "model.path=\"$work/tiny-copy\"" --set train.seed=8 --set generation.max_completion_length=10
[ -e "$run/config.segment-00000002.toml" ] && fail "a refused resume wrote a segment record"

# 2. harmless settings go through; the history keeps both configs
ok second.log "${common[@]}" --output "$run" --resume auto --set train.max_steps=3 --set log.logging_steps=2 \
  --set distributed.collective_timeout_s=60 --set checkpoint.keep_last=3
grep -q "resumed from .*step-00000002" "$work/second.log" || { cat "$work/second.log"; fail "did not resume"; }
grep -q "^max_steps = 2$" "$run/config.resolved.toml" || fail "config.resolved.toml is no longer the run's first config"
grep -q "^max_steps = 3$" "$run/config.segment-00000002.toml" && grep -q "^logging_steps = 2$" "$run/config.segment-00000002.toml" \
  && head -1 "$run/config.segment-00000002.toml" | grep -q "from optimizer step 2 " || fail "config.segment-00000002.toml"
grep -q "^max_steps = 3$" "$run/checkpoints/step-00000003/config.resolved.toml" || fail "the checkpoint keeps no config"
echo "PASS: harmless keys changed; config.resolved.toml (step 0) and config.segment-00000002.toml kept"

# 3. --allow-config-change: on purpose
ok third.log "${common[@]}" --output "$run" --resume auto --set train.max_steps=4 --set grpo.beta=0.04 \
  --allow-config-change grpo.beta
grep -q "settings changed since the checkpoint: .*grpo.beta 0.0 -> 0.04" "$work/third.log" || { cat "$work/third.log"; fail "not said"; }
grep -q "^beta = 0.04$" "$run/config.segment-00000003.toml" || fail "config.segment-00000003.toml"
echo "PASS: --allow-config-change grpo.beta resumed with beta 0.04 (config.segment-00000003.toml)"
refused 1 'train: --allow-config-change grpo.betta: no such config key' "${common[@]}" --output "$run" --resume auto \
  --set train.max_steps=5 --allow-config-change grpo.betta
refused 1 'train: --allow-config-change is for a resumed run' "${common[@]}" --output "$work/new" --allow-config-change grpo.beta

# 4. mid-cycle (μ = 2: a checkpoint after micro-step 1 of a 2-step cycle), an allowed key is still refused
mpirun -np 1 --oversubscribe --bind-to none "$until_signal" --signal-at-micro-step 1 --config configs/ci-small.toml \
  --set log.console=false --output "$work/mid" > "$work/mid.log" 2>&1
[ $? -eq 3 ] || { cat "$work/mid.log"; fail "the signal run"; }
run="$work/mid"
refused 1 'in the middle of a generation cycle or between optimizer steps, where the run.s settings cannot change: generation.temperature 1.0 -> 0.9' \
  --config configs/ci-small.toml --output "$work/mid" --resume auto --set generation.temperature=0.9 \
  --allow-config-change generation.temperature

# 5. --resume with --overwrite, either order, at 2 ranks: one line, nothing moved
run="$work/run"
refused 2 'train: --resume auto and --overwrite contradict each other' "${common[@]}" --output "$run" --resume auto --overwrite
refused 2 'train: --resume auto and --overwrite contradict each other' "${common[@]}" --output "$run" --overwrite --resume auto
ls -d "$work"/run.replaced-* > /dev/null 2>&1 && fail "--overwrite moved the run"

# 6. a checkpoint of another architecture (hidden_size 128 instead of 256)
python3 - "$work/tiny-copy/config.json" "$work/narrow" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=128, intermediate_size=352)
os.makedirs(sys.argv[2])
json.dump(c, open(os.path.join(sys.argv[2], "config.json"), "w"))
PY
refused 1 'model.path ".*/configs/models/tiny" -> ".*narrow"' "${common[@]}" --output "$work/other" \
  --resume "$run/checkpoints/step-00000004" --set "model.path=\"$work/narrow\"" --set train.max_steps=5 --set grpo.beta=0.04
refused 1 '--resume: tensor model.embed_tokens.weight has shape \[272, 256\] in .*step-00000004/model.safetensors but \[272, 128\] in model.path = .*narrow (the model this config trains)' \
  "${common[@]}" --output "$work/other" --resume "$run/checkpoints/step-00000004" --set "model.path=\"$work/narrow\"" \
  --set train.max_steps=5 --set grpo.beta=0.04 --allow-config-change model.path
