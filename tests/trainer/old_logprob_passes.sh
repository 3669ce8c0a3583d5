#!/usr/bin/env bash
# mu = 1 (one optimizer step per generation) skips the old-log-prob forward pass; mu = 2 runs it once
# per generation and reuses the stored values (metrics.jsonl counts the passes).
# With "bf16" as the second argument both runs use train.bf16: generation runs under the same bfloat16
# autocast as the old-log-prob pass (as TRL's does), so the sampler's log-probs must still match it.
set -uo pipefail
rayless=$1
mode=${2:-float32}
extra=()
tolerance=1e-4
if [ "$mode" = bf16 ]; then extra=(--set train.bf16=true); fi
# Without bfloat16 matrix units bfloat16 products run as float32 ones there (train.bf16_products =
# auto), or emulated: either way their float32 sums run in an order that depends on the operands'
# layout, so a decode step's rows and the packed pass's round differently. transformers' own log-probs
# for a row alone and in a batch differ by up to 0.016 on such a CPU (docs/models.md).
if [ "$mode" = bf16 ] && ! grep -q -w -E "avx512_bf16|amx_bf16" /proc/cpuinfo; then tolerance=2e-2; fi
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-mu.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/mu1" \
  --set grpo.num_iterations=1 --set grpo.steps_per_generation=1 --set train.max_steps=2 "${extra[@]}" > "$work/mu1.log" 2>&1 || { cat "$work/mu1.log"; exit 1; }
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/mu2" \
  --set grpo.num_iterations=2 --set grpo.steps_per_generation=1 --set train.max_steps=4 "${extra[@]}" > "$work/mu2.log" 2>&1 || { cat "$work/mu2.log"; exit 1; }
# float32: the old-log-prob pass in pieces of 5 positions along the sequence (grpo.logprob_sequence_chunk_size;
# completions of up to 12 tokens) gives the one pass's values, so the same run
pieces=0
if [ "$mode" = float32 ]; then
  pieces=1
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/mu2-pieces" \
    --set grpo.num_iterations=2 --set grpo.steps_per_generation=1 --set train.max_steps=4 \
    --set grpo.logprob_sequence_chunk_size=5 > "$work/mu2-pieces.log" 2>&1 || { cat "$work/mu2-pieces.log"; exit 1; }
fi
/usr/bin/python3 - "$work" "$tolerance" "$pieces" <<'PY'
import json, sys, glob, os
def passes(run):
    return [json.loads(l)["old_logprob_passes"] for l in open(os.path.join(sys.argv[1], run, "metrics.jsonl")) if l.strip()]
mu1, mu2 = passes("mu1"), passes("mu2")
print("old-log-prob passes per step: mu=1", mu1, "mu=2", mu2)
assert sum(mu1) == 0, "mu = 1 must skip the old-log-prob pass"
assert mu2 == [1, 0, 1, 0], "mu = 2: one pass per generation (steps 1 and 3), reused at steps 2 and 4"
# the reused generation is read from the store: one step group per generation
import h5py
with h5py.File(os.path.join(sys.argv[1], "mu2", "rollouts", "index.h5"), "r") as f:
    steps = sorted(f.keys())
    print("store steps:", steps)
    assert steps == ["step_00000000", "step_00000001"], steps
    g = f["step_00000000"]["rank_00000"]
    assert "old_logps" in g and g["old_logps"].shape == g["completion_ids"].shape
    # mu = 1 has no old-log-prob pass: the store keeps the sampler's log-probs and entropies. The first
    # generation is the same in both runs (same seed, same weights), so they must match the pass's.
    with h5py.File(os.path.join(sys.argv[1], "mu1", "rollouts", "index.h5"), "r") as f1:
        s = f1["step_00000000"]["rank_00000"]
        assert (s["completion_ids"][()] == g["completion_ids"][()]).all(), "the first generations differ"
        for name in ("old_logps", "entropies"):
            diff = abs(s[name][()] - g[name][()]).max()
            print(f"step 0 {name}: sampler vs old-log-prob pass, max difference {diff:.2e}")
            assert diff < float(sys.argv[2]), name
if sys.argv[3] == "1":
    import numpy as np
    with h5py.File(os.path.join(sys.argv[1], "mu2", "rollouts", "index.h5"), "r") as f, \
         h5py.File(os.path.join(sys.argv[1], "mu2-pieces", "rollouts", "index.h5"), "r") as p:
        for step in ("step_00000000", "step_00000001"):
            for rank in f[step]:
                a, b = f[step][rank], p[step][rank]
                assert (a["completion_ids"][()] == b["completion_ids"][()]).all(), f"{step} {rank}: other completions"
                assert int(np.diff(a["completion_offsets"][()]).max()) > 5, "no completion spans two pieces"
                diff = np.abs(a["old_logps"][()] - b["old_logps"][()]).max()
                print(f"{step} {rank} old_logps: pieces of 5 vs one pass, max difference {diff:.2e}")
                assert diff < 1e-5, diff
    def losses(run):
        return [json.loads(l)["loss"] for l in open(os.path.join(sys.argv[1], run, "metrics.jsonl")) if l.strip()]
    print("loss: one pass", losses("mu2"), "pieces", losses("mu2-pieces"))
    assert np.allclose(losses("mu2"), losses("mu2-pieces"), rtol=1e-4, atol=1e-6)
print("PASS")
PY
