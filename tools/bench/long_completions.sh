#!/usr/bin/env bash
# Peak memory of each phase of a GRPO step at long completion lengths (issue 51 item 2): the table in
# docs/long-completions.md.
#
#   tools/bench/long_completions.sh [--lengths 4096,8192,16384] [--rows 1] [--config-json FILE] [--out DIR]
#
# Each phase runs in a process of its own (rayless-bench long-completions), so its peak resident set
# is its own: generation (the KV cache), the log-prob pass without gradients in pieces of
# grpo.logprob_sequence_chunk_size (2048) and in one pass, and the training pass with and without
# gradient checkpointing. The results go to DIR/results.jsonl (one JSON line per run) and the table to
# DIR/table.md (default runs/long-completions). Memory does not depend on the machine's load; the
# seconds do (on 2 cores the whole grid at 4k-16k on the small model takes about an hour, most of it the 16k generation).
# Environment: RAYLESS_BUILD_DIR (default build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
lengths=4096,8192,16384
rows=1
config_json=tools/bench/models/small.json
out=runs/long-completions
while [ $# -gt 0 ]; do
  case $1 in
    --lengths) lengths=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --config-json) config_json=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "long_completions: unknown argument $1" >&2; exit 2 ;;
  esac
done
bench=${RAYLESS_BUILD_DIR:-build}/rayless-bench
[ -x "$bench" ] || { echo "long_completions: $bench is missing (build rayless-bench first)" >&2; exit 2; }
mkdir -p "$out"
results=$out/results.jsonl
: > "$results"

run() {  # label, then rayless-bench arguments
  local label=$1; shift
  echo "long_completions: $label $*" >&2
  "$bench" long-completions --rows "$rows" --config-json "$config_json" "$@" |
    python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); r["label"] = sys.argv[1]; print(json.dumps(r))' "$label" \
    >> "$results"
}

IFS=, read -r -a lens <<< "$lengths"
for T in "${lens[@]}"; do
  run "generation (KV cache)" --phase generate --length "$T"
  run "log-probs, pieces of 2048" --phase logprobs --length "$T" --sequence-chunk 2048
  run "log-probs, one pass" --phase logprobs --length "$T" --sequence-chunk 0
  run "training pass" --phase train --length "$T"
  run "training pass, gradient checkpointing" --phase train-ckpt --length "$T"
done

python3 - "$results" "$out/table.md" <<'EOF'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
lengths = sorted({r["length"] for r in runs})
labels = list(dict.fromkeys(r["label"] for r in runs))
first = runs[0]
lines = [f"Model: {first['layers']} layers, hidden {first['hidden']}, {first['kv_heads']} KV heads of {first['head_dim']}, "
         f"{first['model_parameters'] / 1e6:.1f}M parameters, float32; {first['rows']} completion(s) after a "
         f"{first['prompt']}-token prompt. Peak resident memory added by the phase, MiB (seconds in brackets).", "",
         "| phase | " + " | ".join(f"{t} tokens" for t in lengths) + " |",
         "|---|" + "---:|" * len(lengths)]
for label in labels:
    cells = []
    for t in lengths:
        r = next((r for r in runs if r["label"] == label and r["length"] == t), None)
        cells.append("—" if r is None else f"{r['peak_extra_mib']:.0f} ({r['seconds']:.0f} s)")
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
