#!/usr/bin/env bash
# What a TRL user reaches for, end to end on a 2-rank run of the ci-small config:
#  - several named reward functions: two workers from one file (tools/reward_workers/two_rewards.py)
#    and a reward model (tests/data/reward-model/qwen2), each its own column and rewards/NAME/* metrics;
#    the worker columns recomputed from the exported completions
#  - workers of one batch run at the same time (two workers that each wait for the other)
#  - eval every 2 steps: eval_* metrics equal a recomputation from the eval store
#  - TensorBoard event files read back by TensorBoard's own loader (skipped, visibly, without it)
#  - the sample-completions table on the console
#  - one-line exit-2 errors: a function with no table, a reward model that is not a classifier, an
#    empty or malformed eval dataset
# usage: grpo_user_features.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-features.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
mpi2() { mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml "$@"; }
rewards=(--set 'reward.functions=["length","no_digits","brevity","rm"]' --set 'reward.reward_weights=[1.0,0.5,0.5,1.0]'
         --set 'reward.workers.no_digits.command="python3 tools/reward_workers/two_rewards.py no_digits"'
         --set 'reward.workers.brevity.command="python3 tools/reward_workers/two_rewards.py brevity"'
         --set reward.workers.brevity.batch_size=4 --set 'reward.models.rm.path="tests/data/reward-model/qwen2"')
mpi2 --output "$work/run" --set train.max_steps=4 --set grpo.num_iterations=1 --set grpo.steps_per_generation=1 "${rewards[@]}" \
  --set eval.path=data/demo/prompts.jsonl --set eval.max_samples=5 --set eval.steps=2 --set eval.num_generations=2 \
  --set log.tensorboard=true --set log.num_completions_to_print=2 --set log.logging_steps=2 > "$work/run.log" 2>&1 \
  || { cat "$work/run.log"; fail "the run"; }
cat "$work/run.log"

grep -aq "^samples at step 2:" "$work/run.log" && grep -aq "| length   no_digit brevity  rm       advantage" "$work/run.log" \
  || fail "no sample table with one column per reward function"
echo "PASS: sample-completions table at the logging step"

"$rayless" inspect "$work/run" --export jsonl -o "$work/rows.jsonl" > /dev/null 2>&1 || fail "export"
/usr/bin/python3 - "$work/run" "$work/rows.jsonl" <<'PY' || fail "rewards or eval"
import json, math, sys, os
import h5py, numpy as np
run, rows_path = sys.argv[1:3]
metrics = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
for name in ("no_digits", "brevity", "rm"):
    assert all(f"rewards/{name}/mean" in m for m in metrics), f"rewards/{name}/mean missing"
rows = [json.loads(l) for l in open(rows_path)]
assert rows and set(rows[0]["rewards_per_func"]) == {"length", "no_digits", "brevity", "rm"}, rows[0]["rewards_per_func"]
for r in rows:
    text = r["completion"]
    want_digits = 0.0 if any(c.isdigit() for c in text) else 1.0
    want_brevity = min(0.0, -(len(text.split()) - 8) / 8)
    got = r["rewards_per_func"]
    assert got["no_digits"] == want_digits and abs(got["brevity"] - want_brevity) < 1e-12, (text, got)
    assert math.isfinite(got["rm"]), got
print(f"PASS: {len(rows)} completions: no_digits and brevity recomputed from the text; rm scored; rewards/NAME/mean logged")

# eval: metrics at steps 2 and 4 recomputed from the eval store (both ranks)
weights = np.array([1.0, 0.5, 0.5, 1.0])
with h5py.File(os.path.join(run, "rollouts", "eval", "index.h5"), "r") as f:
    assert sorted(f.keys()) == ["step_00000002", "step_00000004"], sorted(f.keys())
    for step_name in f:
        step = int(step_name[5:])
        rpf = np.concatenate([f[step_name][r]["rewards_per_func"][()] for r in f[step_name]])
        assert len(f[step_name]) == 2 and rpf.shape == (10, 4), (len(f[step_name]), rpf.shape)
        reward = (rpf.astype(np.float32) * weights.astype(np.float32)).sum(1)
        logged = next(m for m in metrics if m["step"] == step)
        assert abs(logged["eval_reward"] - reward.mean()) < 1e-5, (logged["eval_reward"], reward.mean())
        assert abs(logged["eval_rewards/rm/mean"] - rpf[:, 3].mean()) < 1e-5
        assert logged["eval_num_completions"] == 10
        print(f"PASS: eval at step {step}: eval_reward {logged['eval_reward']:.6f} = store's {reward.mean():.6f}")
assert all("eval_reward" not in m for m in metrics if m["step"] in (1, 3))
# expected TensorBoard scalars: every finite metric of every step
expected = {}
for m in metrics:
    for k, v in m.items():
        if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            expected.setdefault(k, []).append([m["step"], v])
json.dump(expected, open(os.path.join(run, "..", "expected_tb.json"), "w"))
PY

python=${RAYLESS_TOOLS_PYTHON:-$src/.venv-tools/bin/python}
[ -x "$python" ] || python=/usr/bin/python3
"$python" tests/trainer/tensorboard_reader.py "$work/run/tensorboard" "$work/expected_tb.json"
rc=$?
[ $rc -eq 0 ] || [ $rc -eq 77 ] || fail "TensorBoard's loader disagrees with metrics.jsonl"
[ $rc -eq 0 ] && echo "PASS: TensorBoard's loader reads every metric of every step"

# workers of one batch run concurrently: each waits for the other's first request
mkdir -p "$work/meet"
mpi2 --output "$work/meet/run" --set train.max_steps=1 \
  --set 'reward.functions=["a","b"]' \
  --set "reward.workers.a.command=\"python3 tests/data/rollout/workers/rendezvous.py a-\$RAYLESS_RANK b-\$RAYLESS_RANK $work/meet\"" \
  --set "reward.workers.b.command=\"python3 tests/data/rollout/workers/rendezvous.py b-\$RAYLESS_RANK a-\$RAYLESS_RANK $work/meet\"" \
  --set reward.workers.a.timeout_s=10 --set reward.workers.b.timeout_s=10 > "$work/meet.log" 2>&1 \
  || { cat "$work/meet.log"; fail "two workers that need each other did not both answer (not concurrent?)"; }
echo "PASS: two workers that wait for each other both answered (they run concurrently)"

# one-line errors, exit 2
check_error() {  # EXPECTED_TEXT ARGS...
  local expected=$1; shift
  "$rayless" train --config configs/ci-small.toml --output "$work/bad" "$@" > "$work/bad.log" 2>&1
  local rc=$?
  rm -rf "$work/bad"
  [ $rc -eq 2 ] && [ "$(grep -c 'rayless: error:' "$work/bad.log")" -eq 1 ] && grep -qF -- "$expected" "$work/bad.log" \
    || { cat "$work/bad.log"; fail "expected exit 2 with '$expected', got $rc"; }
  echo "PASS: $(grep 'rayless: error:' "$work/bad.log")"
}
check_error 'reward.functions: unknown reward function "judge": not a built-in' --set 'reward.functions=["length","judge"]'
check_error 'configs/models/tiny/config.json: no id2label or num_labels: not a sequence-classification model' --set 'reward.functions=["rm"]' \
  --set 'reward.models.rm.path="configs/models/tiny"'
: > "$work/empty.jsonl"
check_error "$work/empty.jsonl: no usable prompt" --set "eval.path=\"$work/empty.jsonl\""
printf '{"prompt": "ok"}\n{"prompt": \n' > "$work/broken.jsonl"
check_error "$work/broken.jsonl:2: not valid JSON" --set "eval.path=\"$work/broken.jsonl\""
