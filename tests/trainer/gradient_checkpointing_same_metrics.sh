#!/usr/bin/env bash
# train.gradient_checkpointing recomputes each layer in backward; the recomputation must be the
# forward's own, so a run with it on logs the same loss, gradient norm and every other metric as one
# with it off, bit for bit. With "bf16" as the second argument both runs use train.bf16 (TRL's defaults
# are bf16 and gradient checkpointing together): the recomputation then has to run under the
# forward's autocast, although backward starts after the forward's autocast scope has closed; it also
# checks what rayless says about train.bf16_products at start.
set -uo pipefail
rayless=$1
mode=${2:-float32}
extra=()
if [ "$mode" = bf16 ]; then extra=(--set train.bf16=true); fi
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-gc.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
for checkpointing in false true; do
  # padded layout: gradient checkpointing keeps no KV cache, so the packed layout's prompt pass is not used
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/$checkpointing" \
    --set train.gradient_checkpointing=$checkpointing --set train.padding_free=false --set train.max_steps=3 "${extra[@]}" \
    > "$work/$checkpointing.log" 2>&1 || { cat "$work/$checkpointing.log"; exit 1; }
done
if [ "$mode" = bf16 ]; then
  # On a CPU without bfloat16 matrix units train.bf16_products = auto runs the bfloat16 products as
  # float32 ones and says so once (rank 0); "bfloat16" there warns once that they are emulated. Where
  # the CPU has the units, neither line.
  if grep -q -w -E "avx512_bf16|amx_bf16" /proc/cpuinfo; then expected=0; else expected=1; fi
  said=$(grep -c "bfloat16 products run as float32 ones" "$work/false.log")
  [ "$said" = "$expected" ] || { echo "FAIL: $said float32-products lines, expected $expected"; cat "$work/false.log"; exit 1; }
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/emulated" \
    --set train.max_steps=1 --set train.bf16=true --set train.bf16_products=bfloat16 > "$work/emulated.log" 2>&1 \
    || { cat "$work/emulated.log"; exit 1; }
  warnings=$(grep -c "train.bf16_products = \"bfloat16\" on a CPU without bfloat16 matrix units" "$work/emulated.log")
  [ "$warnings" = "$expected" ] || { echo "FAIL: $warnings emulated-products warnings, expected $expected"; cat "$work/emulated.log"; exit 1; }
  grep -q "^bf16_products = 'bfloat16'" "$work/emulated/config.resolved.toml" \
    || { echo "FAIL: config.resolved.toml does not record train.bf16_products"; exit 1; }
fi
/usr/bin/python3 - "$work" "$mode" <<'PY'
import json, math, os, sys
def steps(run):
    return [json.loads(l) for l in open(os.path.join(sys.argv[1], run, "metrics.jsonl")) if l.strip()]
plain, checkpointed = steps("false"), steps("true")
assert len(plain) == len(checkpointed) == 3, (len(plain), len(checkpointed))
timing = ("step_time", "tokens_per_second")
compared = 0
for a, b in zip(plain, checkpointed):
    for key, value in a.items():
        if key.startswith("time/") or key.startswith("memory/") or key in timing or not isinstance(value, float):
            continue
        if math.isnan(value) and math.isnan(b[key]):
            continue
        assert value == b[key], f"{sys.argv[2]}, step {a['step']} {key}: without checkpointing {value!r}, with {b[key]!r}"
        compared += 1
print(f"PASS ({sys.argv[2]}): {compared} metric values identical; step 3 loss {plain[2]['loss']!r}, "
      f"grad_norm {plain[2]['grad_norm']!r}")
PY
