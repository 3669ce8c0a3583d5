#!/usr/bin/env bash
# `rayless-bench init-model`: the same seed writes byte-identical weights (what lets TRL and rayless start
# from the same model), another seed different ones; defaults come from the tokenizer; an existing
# --out or a bad config is an input error (exit 2) that leaves nothing behind.
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-init-model.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
config=$src/tools/bench/models/tiny.json

"$rayless" init-model --config-json "$config" --out "$work/a" --seed 7 || fail "init-model a"
"$rayless" init-model --config-json "$config" --out "$work/b" --seed 7 || fail "init-model b"
"$rayless" init-model --config-json "$config" --out "$work/c" --seed 8 || fail "init-model c"
for f in config.json model.safetensors tokenizer.json; do
  [ -s "$work/a/$f" ] || fail "missing $f"
done
cmp -s "$work/a/model.safetensors" "$work/b/model.safetensors" || fail "same seed, different weights"
cmp -s "$work/a/model.safetensors" "$work/c/model.safetensors" && fail "different seeds, same weights"

# vocab_size, eos and pad ids were left to the byte tokenizer
python3 - "$work/a" <<'PY' || exit 1
import json, struct, sys
d = sys.argv[1]
config = json.load(open(f"{d}/config.json"))
vocab = json.load(open(f"{d}/tokenizer.json"))
ids = set(vocab["model"]["vocab"].values()) | {t["id"] for t in vocab.get("added_tokens", [])}
assert config["vocab_size"] == max(ids) + 1, (config["vocab_size"], max(ids))
assert config["eos_token_id"] in ids and config["pad_token_id"] in ids, config
with open(f"{d}/model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
emb = header["model.embed_tokens.weight"]["shape"]
assert emb == [config["vocab_size"], config["hidden_size"]], emb
print("config and tokenizer agree:", config["vocab_size"], "ids, eos", config["eos_token_id"], "pad", config["pad_token_id"])
PY

"$rayless" init-model --config-json "$config" --out "$work/a" > "$work/exists.txt" 2>&1
rc=$?; [ $rc -eq 2 ] || fail "existing --out: exit $rc, expected 2"
grep -q 'already exists' "$work/exists.txt" || fail "existing --out: message $(cat "$work/exists.txt")"
echo '{"model_type": "qwen2", "hidden_size": 64' > "$work/broken.json"
"$rayless" init-model --config-json "$work/broken.json" --out "$work/d" > "$work/broken.txt" 2>&1
rc=$?; [ $rc -eq 2 ] || fail "broken config: exit $rc, expected 2"
grep -q 'broken.json' "$work/broken.txt" || fail "broken config: message $(cat "$work/broken.txt")"
[ ! -e "$work/d" ] || fail "a failed init-model left $work/d behind"
echo PASS
