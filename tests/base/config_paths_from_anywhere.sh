#!/usr/bin/env bash
# Relative paths in a config are relative to the config's directory, so a config works from any
# working directory (docs/config.md, "Paths"). From an empty directory outside the checkout:
#  (1) `rayless config check` passes configs/ci-small.toml and names, one line each with exit 2,
#      the two files configs/example-full.toml needs downloaded (model.path, data.path); with
#      --skip-paths it checks keys, values and rules only;
#  (2) `rayless train --config <checkout>/configs/ci-small.toml` trains a step, with a reward worker
#      whose command finds its script through $RAYLESS_CONFIG_DIR (the config's directory), and
#      config.resolved.toml holds absolute paths;
#  (3) <checkout>/jobs/train-local.sh with its default config (configs/demo.toml) trains a step.
# (Written when paths resolved against the working directory: "data/demo/prompts.jsonl: cannot open
# prompt dataset" outside the checkout.)
# usage: config_paths_from_anywhere.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-paths.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

"$rayless" config check "$src/configs/ci-small.toml" || fail "config check of ci-small.toml from $work"
"$rayless" config check "$src/configs/example-full.toml" 2> check.err
rc=$?
cat check.err
[ $rc -eq 2 ] || fail "config check of example-full.toml: exit $rc, expected 2 (its model and data are not shipped)"
[ "$(wc -l < check.err)" -eq 2 ] || fail "expected one line per missing path"
grep -q "example-full.toml: model.path = \"$src/models/Qwen2.5-0.5B-Instruct\": no such directory" check.err \
  || fail "model.path not named, or not resolved against configs/"
grep -q "example-full.toml: data.path = \"$src/data/gsm8k-train.jsonl\": no such file" check.err \
  || fail "data.path not named, or not resolved against configs/"
"$rayless" config check "$src/configs/example-full.toml" --skip-paths > /dev/null || fail "config check --skip-paths still checks the files"
echo "PASS: config check from $work: ci-small ok; example-full names model.path and data.path (--skip-paths: ok)"

"$rayless" train --config "$src/configs/ci-small.toml" --output run --set train.max_steps=1 \
  --set 'reward.functions=["length","brevity"]' \
  --set 'reward.workers.brevity.command="python3 \"$RAYLESS_CONFIG_DIR/../tools/reward_workers/two_rewards.py\" brevity"' \
  > train.log 2>&1 || { cat train.log; fail "rayless train --config from $work"; }
[ -f run/checkpoints/step-00000001/model.safetensors ] || fail "no checkpoint after the step"
grep -q '"rewards/brevity/mean"' run/metrics.jsonl || fail "the worker found through \$RAYLESS_CONFIG_DIR did not score"
grep -q "^path = '$src/data/demo/prompts.jsonl'" run/config.resolved.toml || fail "config.resolved.toml's data.path is not absolute"
grep -q "^path = '$src/configs/models/tiny'" run/config.resolved.toml || fail "config.resolved.toml's model.path is not absolute"
echo "PASS: rayless train --config from $work: a step, the worker beside the config, absolute paths in config.resolved.toml"

RAYLESS_BIN=$rayless "$src/jobs/train-local.sh" -n 2 -t 1 -o local-run --set train.max_steps=1 > local.log 2>&1 \
  || { cat local.log; fail "jobs/train-local.sh from $work"; }
[ -f local-run/checkpoints/step-00000001/model.safetensors ] || fail "train-local.sh from $work: no checkpoint"
grep -q -- "--config $src/configs/demo.toml" local.log || fail "train-local.sh did not take its checkout's demo config"
echo "PASS: jobs/train-local.sh from $work: the checkout's demo config, a step"
