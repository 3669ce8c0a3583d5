#!/usr/bin/env bash
# Guard rails a new user meets through the CLI, each a finding of issue 53 that failed before:
#  5. TRL's conversational rows ("prompt" as a list of messages) train, also with
#     data.messages_field = "prompt"; a bad message is file:line
#  6. bounds before memory: lengths past max_position_embeddings refused by config check and train
#     (nothing written); a run or a generation that cannot fit in memory refused at start in one
#     line; generate past max_position_embeddings warns as transformers does; an allocation that
#     still fails is one line naming what was running, exit 5 (issue 51 §4: in training also the
#     sizes allocated and the settings that bound them; nothing written)
#  7. generate --adapter on a base without weights is the base training and export use; a run that
#     failed in its first step does not block a plain rerun; a missing eval.path is named so;
#     "[reward.workers.a] has no command" with file:line; generate's flag errors name the flag;
#     negative --show, --step, --seed refused; contradictory flags refused
# usage: guard_rails.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-guard.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
common=(--config configs/ci-small.toml --set grpo.num_iterations=1 --set grpo.steps_per_generation=1
        --set train.max_steps=1 --set log.console=false)
# one_line RC PATTERN COMMAND...: exit RC, exactly one line on stderr, matching PATTERN, no stack trace
one_line() {
  local want=$1 pattern=$2; shift 2
  "$@" > "$work/out.txt" 2> "$work/err.txt"
  local rc=$?
  [ $rc -eq "$want" ] && [ "$(wc -l < "$work/err.txt")" -eq 1 ] && grep -q -- "$pattern" "$work/err.txt" \
    && ! grep -q "frame #" "$work/err.txt" || { cat "$work/err.txt"; fail "expected exit $want and one line with '$pattern', got $rc"; }
  echo "PASS: $(sed "s|$work/||g" "$work/err.txt")"
}
train() { "$rayless" train "${common[@]}" "$@"; }

# 5. TRL's conversational format
python3 - "$work/chat.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write(json.dumps({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Count to {i}."}]}) + "\n")
PY
for field in messages prompt; do
  train --output "$work/chat-$field" --set "data.path=\"$work/chat.jsonl\"" --set tokenizer.chat_template=chatml \
    --set "data.messages_field=\"$field\"" > "$work/chat.log" 2>&1 || { cat "$work/chat.log"; fail "conversational rows, data.messages_field = $field"; }
  "$rayless" inspect "$work/chat-$field" --show 1 > "$work/show.txt" || fail "inspect"
  grep -q "prompt:     <|im_start|>system Be brief.<|im_end|> <|im_start|>user Count to" <(tr '\n' ' ' < "$work/show.txt") \
    || { cat "$work/show.txt"; fail "the prompt is not the chat template's rendering of the messages"; }
done
echo "PASS: {\"prompt\": [messages]} rows train through the chat template (data.messages_field = messages and = prompt)"
cp "$work/chat.jsonl" "$work/badchat.jsonl"
echo '{"prompt": [{"content": "no role"}]}' >> "$work/badchat.jsonl"
one_line 2 "badchat.jsonl:9: field \"prompt\" item 0 must be {\"role\": string" \
  train --output "$work/badchat" --set "data.path=\"$work/badchat.jsonl\"" --set tokenizer.chat_template=chatml

# 6. bounds before memory
one_line 2 'generation.max_completion_length 1000000000 leaves no position for a prompt: the model is made for 2048 (/.*/configs/models/tiny/config.json: max_position_embeddings 2048)' \
  "$rayless" config check configs/ci-small.toml --set generation.max_completion_length=1000000000
one_line 2 'leaves no position for a prompt: the model is made for 2048' train --output "$work/long" --set generation.max_completion_length=1000000000
[ -e "$work/long" ] && fail "a refused run wrote $work/long"
# the dataset's longest prompt (after the template) counts, not data.max_prompt_length: 2040 tokens
# of completion leave 8 for a prompt, fewer than the demo prompts have
one_line 2 'the longest prompt of data.path ([0-9]* tokens; data.max_prompt_length 64) + generation.max_completion_length 2040 = [0-9]* positions, more than the 2048 the model is made for' \
  train --output "$work/long2" --set generation.max_completion_length=2040
[ -e "$work/long2" ] && fail "a refused run wrote $work/long2"
one_line 2 'each rank of this run needs at least .*KV cache (2097152 rows x 2012 positions) .* and has .*: lower generation.max_completion_length' \
  train --output "$work/big" --set train.per_device_train_batch_size=2097152 --set generation.max_completion_length=1948
[ -e "$work/big" ] && fail "a refused run wrote $work/big"
one_line 2 'generate needs at least .* (KV cache (1 rows x 100000000001 positions) .*): lower --max-new-tokens' \
  "$rayless" generate --model configs/models/tiny --prompt hi --max-new-tokens 99999999999
# (a prompt of 2045 tokens and 8 new ones: past the 2048 positions as --max-new-tokens 2100 is, and quick)
one_line 0 'rayless: warning: generate: the prompt.s 2045 tokens + --max-new-tokens 8 = 2053 positions, more than the 2048 the model is made for' \
  "$rayless" generate --model configs/models/tiny --prompt "$(printf 'a%.0s' $(seq 2045))" --max-new-tokens 8 --greedy
# an allocation that fails anyway (an address-space limit of 4 GB under a KV cache of 8 GB that the
# machine has): one error line naming what was running, exit 5
if [ "$(awk '/MemAvailable/ {print $2}' /proc/meminfo)" -gt $((10 * 1024 * 1024)) ]; then  # KiB
  (ulimit -v 4000000; exec "$rayless" generate --model configs/models/tiny --prompt hi --max-new-tokens 2000000) \
    > /dev/null 2> "$work/oom.txt"
  rc=$?
  [ $rc -eq 5 ] && [ "$(grep -c 'rayless: error:' "$work/oom.txt")" -eq 1 ] && ! grep -q "frame #" "$work/oom.txt" \
    && grep -q 'rayless: error: out of memory while generating up to 2000000 tokens: .*allocate' "$work/oom.txt" \
    || { cat "$work/oom.txt"; fail "an allocation failure: expected exit 5 and one line naming the phase, got $rc"; }
  echo "PASS: $(grep 'rayless: error:' "$work/oom.txt")"
  # in training: a generation of 512 rows (32 prompts x 16) x 2012 positions (a KV cache of 3.9 GiB, which the start-up
  # estimate lets through on this machine) under the same limit names the phase, its sizes and the
  # keys that bound them; nothing is written but the empty metrics file
  (ulimit -v 4000000; exec "$rayless" train "${common[@]}" --output "$work/oom-train" --set train.per_device_train_batch_size=64 \
     --set grpo.steps_per_generation=8 --set grpo.num_generations=16 --set generation.max_completion_length=1948) > /dev/null 2> "$work/oom-train.txt"
  rc=$?
  [ $rc -eq 5 ] && [ "$(grep -c 'rayless: error:' "$work/oom-train.txt")" -eq 1 ] && ! grep -q "frame #" "$work/oom-train.txt" \
    && grep -q 'rayless: error: out of memory while generation 0 (sampling, rewards, log-probs) (512 rows x 2012 positions, KV cache 3.9 GiB, .*; bounded by train.per_device_train_batch_size 64 x steps_per_generation 8, data.max_prompt_length 64 + generation.max_completion_length 1948, generation.slots auto, generation.prefill_chunk auto): .*allocate.* (lower the settings named' "$work/oom-train.txt" \
    || { cat "$work/oom-train.txt"; fail "an allocation failure in training: expected exit 5 and one line naming the phase, sizes and settings, got $rc"; }
  [ -z "$(ls "$work/oom-train/checkpoints" 2>/dev/null)" ] && [ ! -s "$work/oom-train/metrics.jsonl" ] \
    || fail "the run that ran out of memory wrote $(ls "$work/oom-train" "$work/oom-train/checkpoints")"
  echo "PASS: $(grep 'rayless: error:' "$work/oom-train.txt" | cut -c1-300)..."
else
  echo "SKIP: the out-of-memory line needs 10 GiB available"
fi

# 7. smaller ones
# a. --adapter on a base without weights: the base of training and export (model.init_seed 1234)
train --output "$work/lora" --set lora.enabled=true --set lora.r=4 --set 'lora.target_modules=["all-linear"]' \
  --set optim.learning_rate=0.05 --set train.max_steps=2 > "$work/lora.log" 2>&1 || { cat "$work/lora.log"; fail "LoRA run"; }
"$rayless" export --merge --adapter "$work/lora/checkpoints/step-00000002" --model configs/models/tiny --output "$work/merged" \
  > /dev/null || fail "export"
gen=(--prompt "Name a color." --max-new-tokens 12 --greedy --json)
"$rayless" generate --model configs/models/tiny --adapter "$work/lora/checkpoints/step-00000002" "${gen[@]}" > "$work/adapter.json" || fail "generate --adapter"
"$rayless" generate --model "$work/merged" "${gen[@]}" > "$work/merged.json" || fail "generate merged"
python3 - "$work/adapter.json" "$work/merged.json" <<'PY' || fail "generate --adapter ran another base than training and export"
import json, sys
a, m = (json.load(open(p)) for p in sys.argv[1:])
assert a["completion_ids"] == m["completion_ids"], (a["completion_ids"], m["completion_ids"])
assert max(abs(x - y) for x, y in zip(a["logprobs"], m["logprobs"])) < 1e-4, (a["logprobs"], m["logprobs"])
PY
echo "PASS: generate --adapter on configs/models/tiny equals the merged export (init seed 1234 for both)"
# b. a run that fails in its first step, then a plain rerun
train --output "$work/first" --set 'reward.functions=["w"]' --set 'reward.workers.w.command="exit 1"' > "$work/first.log" 2>&1 \
  && fail "a run whose reward worker exits at once succeeded"
[ -f "$work/first/metrics.jsonl" ] && [ ! -s "$work/first/metrics.jsonl" ] || fail "expected the failed run's empty metrics.jsonl"
train --output "$work/first" > "$work/rerun.log" 2>&1 || { cat "$work/rerun.log"; fail "a plain rerun after a failed first step"; }
echo "PASS: a plain rerun goes ahead after a run that failed in its first step"
# c. d. e. f. g.
one_line 2 "$work/none.jsonl: cannot open prompt dataset (eval.path)" train --output "$work/eval" --set "eval.path=\"$work/none.jsonl\""
printf '[reward]\nfunctions = ["length", "a"]\n\n[reward.workers.a]\ntimeout_s = 5\n' > "$work/worker.toml"
one_line 2 "worker.toml:4: \[reward.workers.a\] has no command" "$rayless" config check "$work/worker.toml"
one_line 2 'generate: --temperature -1 is not allowed: expected a number >= 0' \
  "$rayless" generate --model configs/models/tiny --prompt hi --temperature -1
grep -q -- "--set" "$work/err.txt" && fail "generate's flag error speaks of --set"
one_line 2 'generate: --seed -1 is not allowed' "$rayless" generate --model configs/models/tiny --prompt hi --seed -1
one_line 2 'inspect: --show -1 is not allowed' "$rayless" inspect "$work/first" --show -1
one_line 2 'inspect: --step -3 is not allowed' "$rayless" inspect "$work/first" --step -3
one_line 2 'generate: --greedy and --temperature 0.7 contradict each other' \
  "$rayless" generate --model configs/models/tiny --prompt hi --greedy --temperature 0.7
one_line 2 'inspect: --show, --export and --histogram each print something else' \
  "$rayless" inspect "$work/first" --export jsonl --histogram entropies
