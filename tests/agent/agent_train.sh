#!/usr/bin/env bash
# Tools and environments end to end, through `rayless train`, `rayless inspect` and h5py:
#  1. a sampled model calls the calculator (tests/data/agent/caller, taught the dialog by
#     tools/make_agent_model.py): the worker runs the call, its result enters through the chat template,
#     the model answers, the answer reward checks it; the store marks the result's tokens out of the loss
#     and keeps the conversation; inspect shows it turn by turn; tools/read_rollouts.py reads it
#  2. guess-a-number (tools/agent_workers/guess_number.py) with replayed turns: one environment
#     instance per rollout, 3 and more turns per episode, get_reward as the GuessNumber column
#  3. bad input: one line each; exit 2 for what the user got wrong, 1 for a tool that hangs
# usage: agent_train.sh RAYLESS
set -uo pipefail
rayless=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-agent.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
calculator='tools.calculator.command="python3 tools/agent_workers/rayless_agent.py tools tools/agent_workers/calculator.py"'
common=(--set train.bf16=false --set train.gradient_checkpointing=false --set log.logging_steps=1
        --set checkpoint.save_steps=0 --set distributed.threads_per_rank=1 --set data.max_prompt_length=2048)
# the calculator's worker under a loaded machine (a parallel ctest, a build beside it): its answers
# may wait for a core longer than the shipped 30 s (seen at SCHED_IDLE beside a build)
patient=(--set tools.calculator.timeout_s=600)

# ---- 1. a sampled model calls a tool --------------------------------------------------------------
# (the worked example of docs/tools.md, as shipped, started from another directory: its paths and its
# worker command follow the config file)
(cd "$work" && "$rayless" train --config "$src/configs/calculator-tools.toml" --output "$work/calc" "${common[@]}" "${patient[@]}") \
  > "$work/calc.log" 2>&1 || { cat "$work/calc.log"; fail "the calculator run"; }
/usr/bin/python3 - "$work/calc" <<'PY' || fail "the calculator run's store or metrics"
import json, sys
import h5py
run = sys.argv[1]
metrics = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert len(metrics) == 2, metrics
assert metrics[0]["tools/call_frequency"] > 0, metrics[0]
assert metrics[0]["rewards/answer/mean"] > 0, metrics[0]
called = 0
with h5py.File(f"{run}/rollouts/index.h5", "r") as store:
    for step in ("step_00000000", "step_00000001"):
        g = store[f"{step}/rank_00000"]
        offsets, mask = g["completion_offsets"][()], g["tool_mask"][()]
        ids, rewards = g["completion_ids"][()], g["rewards_per_func"][()]
        for i, text in enumerate(g["conversations"].asstr()[()]):
            record = json.loads(text)
            row_mask = mask[offsets[i]:offsets[i + 1]]
            # the mask is 0 exactly on the tool turns' tokens
            tool = [t for turn in record["turns"] if turn["by"] == "tool" for t in range(turn["start"], turn["end"])]
            assert sorted(t for t in range(len(row_mask)) if row_mask[t] == 0) == tool, (step, i, record["turns"])
            results = [m for m in record["messages"] if m["role"] == "tool"]
            if results and results[0] == {"role": "tool", "name": "add", "content": "5"}:
                called += 1
                assert len(tool) > 0 and record["tool_calls"] == 1
                assert record["messages"][0]["tool_calls"][0]["function"] == {"name": "add", "arguments": {"a": 2, "b": 3}}
                if record["messages"][-1]["content"] == "The answer is 5.":
                    assert rewards[i, 0] == 1.0, (step, i, rewards[i])
assert called >= 4, called
print(f"PASS: sampled model called add(2, 3) in {called} of 8 completions; tool tokens masked; answers scored")
PY
"$rayless" inspect "$work/calc" --step 0 --show 4 > "$work/show.txt" 2>&1 || { cat "$work/show.txt"; fail "inspect --show"; }
grep -q "\[tool, out of the loss\]" "$work/show.txt" && grep -q "result: add -> 5" "$work/show.txt" \
  || { cat "$work/show.txt"; fail "inspect --show does not show the conversation turn by turn"; }
"$rayless" inspect "$work/calc" > "$work/summary.txt" 2>&1 && grep -q "tool tokens" "$work/summary.txt" \
  || { cat "$work/summary.txt"; fail "inspect's summary has no tool tokens"; }
"$rayless" inspect "$work/calc" --export jsonl -o "$work/export.jsonl" > /dev/null 2>&1 && grep -q '"model_tokens"' "$work/export.jsonl" \
  && grep -q '"conversation"' "$work/export.jsonl" || fail "export has no model_tokens and conversation"
/usr/bin/python3 tools/read_rollouts.py "$work/calc/rollouts/index.h5" --step 0 --show 4 > "$work/h5py.txt" 2>&1 \
  && grep -q "model tokens" "$work/h5py.txt" && grep -q "tool: '5'" "$work/h5py.txt" \
  || { cat "$work/h5py.txt"; fail "tools/read_rollouts.py --show prints no model tokens or tool result"; }
echo "PASS: inspect and tools/read_rollouts.py show the conversation"
# later turns on the kept keys and values (agent.keep_kv_cache, the default) against prefilling every
# turn again, as TRL does: the same conversations, token for token
grep -q "tools: later turns resume on kept keys and values" "$work/calc.log" || { cat "$work/calc.log"; fail "no turn resumed on kept keys and values"; }
(cd "$work" && "$rayless" train --config "$src/configs/calculator-tools.toml" --output "$work/calc-prefill" "${common[@]}" "${patient[@]}" \
  --set agent.keep_kv_cache=false) > "$work/calc-prefill.log" 2>&1 || { cat "$work/calc-prefill.log"; fail "the calculator run, prefilling every turn"; }
/usr/bin/python3 - "$work/calc" "$work/calc-prefill" <<'PY' || fail "kept keys and values changed the conversations"
import sys
import h5py
with h5py.File(f"{sys.argv[1]}/rollouts/index.h5", "r") as kept, h5py.File(f"{sys.argv[2]}/rollouts/index.h5", "r") as prefill:
    for step in ("step_00000000", "step_00000001"):
        a, b = kept[f"{step}/rank_00000"], prefill[f"{step}/rank_00000"]
        for name in ("completion_ids", "completion_offsets", "tool_mask"):
            assert (a[name][()] == b[name][()]).all(), (step, name)
print("PASS: later turns on kept keys and values give the conversations of prefilling every turn")
PY

# ---- 2. guess-a-number: an environment over 3+ turns --------------------------------------------
/usr/bin/python3 - "$work/guess.jsonl" <<'PY'
import json, sys
def ids(text):  # the byte tokenizer of tests/data/agent/model: bytes, <|im_end|> = 260
    return list(text.encode()) + [260]
def guess(n):
    return ids('<tool_call>\n{"name": "guess", "arguments": {"number": %d}}\n</tool_call>' % n)
rows = [{"messages": [{"role": "user", "content": "Find my number."}], "secret": 37}] * 2
turns = [[guess(50), guess(25), guess(37), ids("It is 37.")],   # lower, higher, correct: 4 turns
         [guess(37), ids("37!")]]                              # correct at once
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"step": 0, "rank": 0, "rows": rows, "completion_turns": turns}) + "\n")
PY
"$rayless" train --output "$work/guess" "${common[@]}" --set model.path=tests/data/agent/model \
  --set data.path=tests/data/agent/guess.jsonl --set train.replay_rollouts="$work/guess.jsonl" \
  --set 'environment.command="python3 tools/agent_workers/rayless_agent.py environment tools/agent_workers/guess_number.py GuessNumber"' \
  --set environment.timeout_s=600 \
  --set 'reward.functions=["length"]' --set generation.max_completion_length=512 \
  --set train.max_steps=1 --set grpo.num_generations=2 --set train.per_device_train_batch_size=2 \
  > "$work/guess.log" 2>&1 || { cat "$work/guess.log"; fail "the environment run"; }
/usr/bin/python3 - "$work/guess" <<'PY' || fail "the environment run's store"
import json, sys
import h5py
with h5py.File(f"{sys.argv[1]}/rollouts/index.h5", "r") as store:
    g = store["step_00000000/rank_00000"]
    assert [str(n) for n in g.attrs["reward_names"]] == ["length", "GuessNumber"], list(g.attrs["reward_names"])
    np = g["rewards_per_func"][()]
    assert abs(np[0, 1] - 1 / 3) < 1e-7 and np[1, 1] == 1.0, np  # float32, as TRL holds rewards
    records = [json.loads(t) for t in g["conversations"].asstr()[()]]
    answers = [m["content"] for m in records[0]["messages"] if m["role"] == "tool"]
    assert answers == ["lower", "higher", "correct"], answers
    assert sum(t["by"] == "model" for t in records[0]["turns"]) == 4, records[0]["turns"]
    assert [m["content"] for m in records[1]["messages"] if m["role"] == "tool"] == ["correct"]
metrics = json.loads(open(f"{sys.argv[1]}/metrics.jsonl").readline())
assert abs(metrics["rewards/GuessNumber/mean"] - 2 / 3) < 1e-6, metrics
assert metrics["tools/call_frequency"] == 2.0, metrics["tools/call_frequency"]
print("PASS: guess-a-number: 4 turns with lower / higher / correct, get_reward 1/3 and 1 as the GuessNumber column")
PY

# ---- 3. bad input ---------------------------------------------------------------------------------
one_line() {  # expected exit code, what the message must say, then the command
  local code=$1 want=$2; shift 2
  "$@" > "$work/bad.out" 2> "$work/bad.err"
  local rc=$?
  [ $rc -eq "$code" ] || { cat "$work/bad.out" "$work/bad.err"; fail "exit $rc, expected $code: $want"; }
  local errors; errors=$(grep -c "rayless: error:" "$work/bad.err")
  [ "$errors" -eq 1 ] || { cat "$work/bad.err"; fail "$errors error lines, expected one: $want"; }
  grep -q -- "$want" "$work/bad.err" || { cat "$work/bad.err"; fail "the error does not say: $want"; }
  echo "PASS: exit $code, one line: $(grep "rayless: error:" "$work/bad.err" | cut -c1-160)"
}
base=("$rayless" train "${common[@]}" --set train.max_steps=1 --set grpo.num_generations=2
      --set train.per_device_train_batch_size=2 --set generation.max_completion_length=64 --set "$calculator")
# a chat template that cannot show tool calls
# (that model has 64 positions: the completion leaves room for a prompt, so the template is what is refused)
one_line 2 "does not support tool calling" "${base[@]}" --output "$work/bad1" --set model.path=tests/data/trl-steps/model \
  --set tokenizer.chat_template=chatml --set data.path=tests/data/agent/calc.jsonl --set generation.max_completion_length=16
# plain-text prompts: TRL runs tools only for conversations
printf '{"prompt": "What is 2 plus 3?", "answer": "5"}\n' > "$work/plain.jsonl"
one_line 2 "plain.jsonl:1: tools and environments need conversational prompts" "${base[@]}" --output "$work/bad2" \
  --set model.path=tests/data/agent/caller --set data.path="$work/plain.jsonl"
# a replay of tool turns without tools configured
one_line 2 "no \[tools.NAME\] and no \[environment\]" "$rayless" train "${common[@]}" --output "$work/bad3" \
  --set model.path=tests/data/agent/model --set data.path=tests/data/agent/guess.jsonl \
  --set train.replay_rollouts="$work/guess.jsonl" --set train.max_steps=1 --set grpo.num_generations=2 \
  --set train.per_device_train_batch_size=2 --set generation.max_completion_length=512
# a tool that hangs: stopped after its timeout_s, the run stops naming the tool and the row
/usr/bin/python3 - "$work/hang.jsonl" <<'PY'
import json, sys
call = list('<tool_call>\n{"name": "sleep", "arguments": {"seconds": 60}}\n</tool_call>'.encode()) + [260]
rows = [{"messages": [{"role": "user", "content": "Wait."}]}] * 2
with open(sys.argv[1], "w") as f:
    f.write(json.dumps({"step": 0, "rank": 0, "rows": rows, "completion_turns": [[call, [260]], [[260]]]}) + "\n")
PY
one_line 1 'tool "sleep" called by .*hang.jsonl:1 row 0' "$rayless" train "${common[@]}" --output "$work/bad4" \
  --set model.path=tests/data/agent/model --set data.path=tests/data/agent/guess.jsonl \
  --set train.replay_rollouts="$work/hang.jsonl" --set train.max_steps=1 --set grpo.num_generations=2 \
  --set train.per_device_train_batch_size=2 --set generation.max_completion_length=512 --set 'reward.functions=["length"]' \
  --set 'tools.misc.command="python3 tools/agent_workers/rayless_agent.py tools tests/data/agent/test_tools.py"' \
  --set tools.misc.timeout_s=2
grep -q "timeout_s = 2 s" "$work/bad.err" || fail "the hang's message does not name the timeout"
echo "PASS: tools end to end"
