#!/usr/bin/env bash
# grpo.top_entropy_quantile = 0.2 trains on the 20 % highest-entropy active tokens of all ranks: a
# 2-rank run's store records the threshold, and ~20 % of the step's active tokens (both ranks
# together) have an entropy at or above it. Written after the trainer passed 1 - q where q was due
# and kept ~80 %. Also checks that `rayless inspect` numbers generation steps from 0, as the store.
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-entropy.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
# mu = 2 runs the old-log-prob pass, so the stored entropies are the ones the loss's first
# micro-batch thresholds (same weights, same pass); steps_per_generation = 1 puts a generation in one
# micro-batch
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/run" \
  --set grpo.top_entropy_quantile=0.2 --set grpo.num_iterations=2 --set grpo.steps_per_generation=1 \
  --set train.max_steps=2 --set generation.max_completion_length=24 --set reward.length_target=20 \
  > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
"$rayless" inspect "$work/run" --step 0 > "$work/inspect.txt" 2>&1 || { cat "$work/inspect.txt"; exit 1; }
grep -q "^step 0" "$work/inspect.txt" || { echo "inspect --step 0 did not show step 0:"; cat "$work/inspect.txt"; exit 1; }
/usr/bin/python3 - "$work/run" <<'PY'
import sys, os
import h5py, numpy as np
with h5py.File(os.path.join(sys.argv[1], "rollouts", "index.h5"), "r") as f:
    assert "step_00000000" in f, sorted(f.keys())
    ranks = f["step_00000000"]
    values, thresholds = [], set()
    for name in sorted(ranks.keys()):
        g = ranks[name]
        mask = g["completion_mask"][()].astype(bool)
        values.append(g["entropies"][()][mask])
        thresholds.add(float(g.attrs["entropy_threshold"]))
    assert len(thresholds) == 1, f"ranks stored different thresholds {thresholds}"
    threshold = thresholds.pop()
    entropies = np.concatenate(values).astype(np.float32)
    kept = float((entropies >= np.float32(threshold)).mean())
    expected = float(np.quantile(entropies, 0.8))
    print(f"{len(entropies)} active tokens on {len(values)} ranks, threshold {threshold:.6f} "
          f"(numpy 0.8-quantile {expected:.6f}), kept {kept:.3f}")
    assert abs(threshold - expected) <= 1e-5 * max(1.0, abs(expected)), "the threshold is not the 0.8 quantile"
    assert 0.15 <= kept <= 0.25, f"top_entropy_quantile = 0.2 must keep ~20 % of the tokens, kept {kept:.1%}"
print("PASS")
PY
