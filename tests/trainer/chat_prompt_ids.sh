#!/usr/bin/env bash
# A training run on a messages dataset feeds the model the ids transformers' apply_chat_template gives:
# the model directory carries its own Jinja template (tokenizer_config.json, Qwen3 style) and the run
# passes tokenizer.chat_template_kwargs = { enable_thinking = false }; every prompt in the rollout store
# must equal the ids of tests/data/chat-models/cases.json (made with transformers). A plain-text
# dataset on the same directory gets tokenizer(text)'s ids, and chat_template = "none" with messages
# stops at start with one line naming the dataset line. On directories of tests/data/tokenizer-classes
# whose tokenizer class (as transformers 5.24 loads it: Qwen2Tokenizer for model_type qwen2) replaces
# tokenizer.json's pre-tokenizer, the stored prompt ids of a messages and a plain-text run equal
# transformers' too, and the start-up log says which pipeline is used and why.
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

# tokenizer classes: a GPT-2-regex tokenizer.json under model_type qwen2 (messages), and a Llama-3-style one
# named LlamaTokenizerFast under qwen2 (plain text: its BOS post-processor stays, its regex does not)
classes=tests/data/tokenizer-classes
/usr/bin/python3 - "$classes" "$work" <<'PY'
import json, sys
classes, work = sys.argv[1:3]
with open(f"{work}/classes-chat.jsonl", "w") as f:
    for conv in json.load(open(f"{classes}/conversations.json")):
        f.write(json.dumps({"messages": conv}) + "\n")
cases = {d["dir"]: d for d in json.load(open(f"{classes}/cases.json"))["directories"]}
with open(f"{work}/classes-plain.jsonl", "w") as f:
    for t in cases["qwen2-llama-class"]["texts"]:
        f.write(json.dumps({"prompt": t["text"]}) + "\n")
PY
for dir in qwen2-gpt2-pipeline qwen2-llama-class; do
  mkdir -p "$work/$dir"
  cp "$classes/$dir/tokenizer.json" "$classes/$dir/tokenizer_config.json" "$work/$dir/"
  sed -e 's/"vocab_size": 712/"vocab_size": 448/' "$work/model/config.json" > "$work/$dir/config.json"
done
"$rayless" train --config configs/ci-small.toml --output "$work/classes-chat" "${common[@]}" \
  --set "model.path=\"$work/qwen2-gpt2-pipeline\"" --set "data.path=\"$work/classes-chat.jsonl\"" \
  --set train.per_device_train_batch_size=20 > "$work/classes-chat.log" 2>&1 || { cat "$work/classes-chat.log"; fail "classes chat run"; }
grep -a "Qwen2Tokenizer" "$work/classes-chat.log" | grep -q "differs from tokenizer.json: pre-tokenizer Split on Qwen2's regex" \
  || { cat "$work/classes-chat.log"; fail "the start-up log does not say that Qwen2Tokenizer replaces tokenizer.json's pre-tokenizer"; }
grep -a "differs from tokenizer.json" "$work/classes-chat.log"
"$rayless" train --config configs/ci-small.toml --output "$work/classes-plain" "${common[@]}" \
  --set "model.path=\"$work/qwen2-llama-class\"" --set "data.path=\"$work/classes-plain.jsonl\"" \
  > "$work/classes-plain.log" 2>&1 || { cat "$work/classes-plain.log"; fail "classes plain run"; }

/usr/bin/python3 - "$fixture/cases.json" "$work" "$classes/cases.json" <<'PY' || fail "prompt ids differ from transformers"
import json, sys
import h5py
cases_path, work, classes_path = sys.argv[1:4]
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
classes = {d["dir"]: d for d in json.load(open(classes_path))["directories"]}
want = {tuple(c["ids"]) for c in classes["qwen2-gpt2-pipeline"]["conversations"]}
got = stored_prompts("classes-chat")
assert len(got) == 20 and {tuple(p) for p in got} == want, (len(got), [p[:8] for p in got])
print(f"PASS: {len(got)} stored prompts (10 conversations) on a GPT-2-regex tokenizer.json under model_type qwen2 = "
      "transformers' Qwen2Tokenizer ids")
want = {tuple(t["ids"]) for t in classes["qwen2-llama-class"]["texts"]}
got = stored_prompts("classes-plain")
assert {tuple(p) for p in got} == want, [p[:8] for p in got]
print(f"PASS: {len(got)} stored plain-text prompts on a LlamaTokenizerFast-named tokenizer under model_type qwen2 = "
      "transformers' Qwen2Tokenizer tokenizer(text) ids (BOS from tokenizer.json's post-processor)")
PY

"$rayless" train --config configs/ci-small.toml --output "$work/none" "${common[@]}" --set "data.path=\"$work/chat.jsonl\"" \
  --set 'tokenizer.chat_template="none"' > "$work/none.log" 2>&1
rc=$?
cat "$work/none.log"
[ $rc -eq 2 ] && [ "$(grep -c 'rayless: error:' "$work/none.log")" -eq 1 ] \
  && grep -q "chat.jsonl:1: .*messages need a chat template" "$work/none.log" || fail "chat_template none with messages: rc $rc"
[ ! -e "$work/none/rollouts" ] || fail "a refused run wrote rollouts"
echo "PASS: chat_template = none with a messages dataset: exit 2, one line naming the dataset line"
