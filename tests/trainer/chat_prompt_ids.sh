#!/usr/bin/env bash
# A training run on a messages dataset feeds the model the ids transformers' apply_chat_template gives:
# the model directory carries its own Jinja template (tokenizer_config.json, Qwen3 style) and the run
# passes tokenizer.chat_template_kwargs = { enable_thinking = false }; every prompt in the rollout store
# must equal the ids of tests/data/chat-models/cases.json (made with transformers). A plain-text
# dataset on the same directory gets tokenizer(text)'s ids, and chat_template = "none" with messages
# stops at start with one line naming the dataset line.
# usage: chat_prompt_ids.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-chat-ids.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
fixture=tests/data/chat-models

# a tiny Qwen2 over the fixture's tokenizer (708 tokens); no weights: model.init_seed initialises them
mkdir -p "$work/model"
cp "$fixture/think-config-string/tokenizer.json" "$fixture/think-config-string/tokenizer_config.json" "$work/model/"
cat > "$work/model/config.json" <<'JSON'
{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 712, "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "eos_token_id": 2, "pad_token_id": 0}
JSON
/usr/bin/python3 - "$fixture/conversations" "$work/chat.jsonl" "$work/plain.jsonl" <<'PY'
import json, sys
conv, chat, plain = sys.argv[1:4]
with open(chat, "w") as f:
    for name in ["single", "multi_think", "extra_keys", "system"]:
        f.write(json.dumps({"messages": json.load(open(f"{conv}/{name}.json")), "conv": name}) + "\n")
with open(plain, "w") as f:
    for text in ["Hello world", "  leading space and <think>tags</think>\n"]:
        f.write(json.dumps({"prompt": text}) + "\n")
PY
common=(--set "model.path=\"$work/model\"" --set 'tokenizer.path=""' --set train.max_steps=1
        --set grpo.num_generations=2 --set grpo.num_iterations=1 --set grpo.steps_per_generation=1
        --set train.per_device_train_batch_size=8 --set data.shuffle=false --set data.max_prompt_length=256)
"$rayless" train --config configs/ci-small.toml --output "$work/chat" "${common[@]}" --set "data.path=\"$work/chat.jsonl\"" \
  --set 'tokenizer.chat_template_kwargs={ enable_thinking = false }' > "$work/chat.log" 2>&1 || { cat "$work/chat.log"; fail "chat run"; }
grep -a "chat template" "$work/chat.log" | head -1
"$rayless" train --config configs/ci-small.toml --output "$work/plain" "${common[@]}" --set "data.path=\"$work/plain.jsonl\"" \
  --set grpo.num_generations=4 > "$work/plain.log" 2>&1 || { cat "$work/plain.log"; fail "plain run"; }

/usr/bin/python3 - "$fixture/cases.json" "$work" <<'PY' || fail "prompt ids differ from transformers"
import json, sys
import h5py
cases_path, work = sys.argv[1:3]
cases = json.load(open(cases_path))["cases"]
def expected(args):
    for c in cases:
        if c["dir"] == "think-config-string" and c["args"] == args:
            return c["ids"]
    raise SystemExit(f"no fixture case for {args}")
def stored_prompts(run):
    with h5py.File(f"{work}/{run}/rollouts/index.h5", "r") as f:
        out = []
        for step in f:
            for rank in f[step]:
                g = f[step][rank]
                ids, off = g["prompt_ids"][()], g["prompt_offsets"][()]
                out += [list(map(int, ids[off[i]:off[i + 1]])) for i in range(len(off) - 1)]
        return out
kwargs = ["--kwargs", json.dumps({"enable_thinking": False})]
want = {tuple(expected(["--messages", f"conversations/{n}.json"] + kwargs)) for n in ["single", "multi_think", "extra_keys", "system"]}
got = stored_prompts("chat")
assert len(got) == 8 and {tuple(p) for p in got} == want, (len(got), [p[:8] for p in got])
print(f"PASS: {len(got)} stored prompts of a messages dataset = transformers' apply_chat_template ids (enable_thinking=false)")
want = {tuple(expected(["--text", t])) for t in ["Hello world", "  leading space and <think>tags</think>\n"]}
got = stored_prompts("plain")
assert {tuple(p) for p in got} == want, [p[:8] for p in got]
print(f"PASS: {len(got)} stored prompts of a plain-text dataset = transformers' tokenizer(text) ids")
PY

"$rayless" train --config configs/ci-small.toml --output "$work/none" "${common[@]}" --set "data.path=\"$work/chat.jsonl\"" \
  --set 'tokenizer.chat_template="none"' > "$work/none.log" 2>&1
rc=$?
cat "$work/none.log"
[ $rc -eq 2 ] && [ "$(grep -c 'rayless: error:' "$work/none.log")" -eq 1 ] \
  && grep -q "chat.jsonl:1: .*messages need a chat template" "$work/none.log" || fail "chat_template none with messages: rc $rc"
[ ! -e "$work/none/rollouts" ] || fail "a refused run wrote rollouts"
echo "PASS: chat_template = none with a messages dataset: exit 2, one line naming the dataset line"
