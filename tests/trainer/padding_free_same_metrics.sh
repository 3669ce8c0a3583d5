#!/usr/bin/env bash
# train.padding_free (the packed log-prob pass, on by default) against TRL's padded layout: the same
# 2-rank run with beta > 0 (reference pass) and mu = 2 (old-log-prob pass) must log the same loss,
# kl, entropy, clip ratios and gradient norm, up to float32 rounding.
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-padfree.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
for packed in true false; do
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/$packed" \
    --set train.padding_free=$packed --set train.max_steps=2 --set grpo.beta=0.04 --set grpo.num_iterations=2 \
    > "$work/$packed.log" 2>&1 || { cat "$work/$packed.log"; exit 1; }
done
/usr/bin/python3 - "$work" <<'PY'
import json, math, os, sys
def steps(run):
    return [json.loads(l) for l in open(os.path.join(sys.argv[1], run, "metrics.jsonl")) if l.strip()]
packed, padded = steps("true"), steps("false")
assert len(packed) == len(padded) == 2, (len(packed), len(padded))
timing = ("step_time", "tokens_per_second", "memory/peak_rss_mb")
compared = 0
for a, b in zip(packed, padded):
    for key, value in a.items():
        if key.startswith("time/") or key in timing or not isinstance(value, float) or math.isnan(value):
            continue
        other = b[key]
        assert abs(value - other) <= 1e-4 * max(1.0, abs(value)), f"step {a['step']} {key}: packed {value} padded {other}"
        compared += 1
for key in ("loss", "kl", "entropy", "grad_norm"):
    assert key in packed[0], key
print(f"PASS: {compared} metric values equal; step 2 loss {packed[1]['loss']:.6g} vs {padded[1]['loss']:.6g}, "
      f"kl {packed[1]['kl']:.6g} vs {padded[1]['kl']:.6g}")
PY
