#!/usr/bin/env bash
# TRL's batch geometry: only the generation batch of all ranks must divide by num_generations, so a
# group may span ranks. 2 ranks x per_device_train_batch_size 3 x steps_per_generation 2 (from
# grpo.generation_batch_size = 12) with num_generations 4: 3 groups, the middle one split 2 + 2. The
# store must show the split, and the split group's advantages must be its z-scores over all 4
# completions (rewards of both ranks), as if the group were on one rank.
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-span.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$work/run" \
  --set train.per_device_train_batch_size=3 --set grpo.num_generations=4 --set grpo.steps_per_generation=0 \
  --set grpo.generation_batch_size=12 --set grpo.num_iterations=1 --set train.max_steps=4 \
  > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }
/usr/bin/python3 - "$work/run" <<'PY'
import sys, os
import h5py, numpy as np
with h5py.File(os.path.join(sys.argv[1], "rollouts", "index.h5"), "r") as f:
    steps = sorted(f.keys())
    assert len(steps) == 2, f"4 optimizer steps of 2 micro-batches = 2 generations, store has {steps}"
    for step in steps:
        parts = [f[step][r] for r in ("rank_00000", "rank_00001")]
        groups = [list(p["group_index"][()]) for p in parts]
        assert [len(g) for g in groups] == [6, 6], groups
        row = np.concatenate(groups)
        assert all(len(set(row[4 * k:4 * k + 4])) == 1 for k in range(3)), f"{step}: groups are not 4 consecutive rows: {groups}"
        assert groups[0][4] == groups[1][0], f"{step}: the middle group does not span the ranks: {groups}"
        rewards = np.concatenate([p["rewards"][()] for p in parts]).astype(np.float32)
        advantages = np.concatenate([p["advantages"][()] for p in parts])
        for k in range(3):
            r = rewards[4 * k:4 * k + 4]
            expected = (r - r.mean()) / (r.std(ddof=1) + 1e-4)
            got = advantages[4 * k:4 * k + 4]
            assert np.allclose(got, expected, rtol=1e-5, atol=1e-5), f"{step} group {k}: {got} vs {expected}"
        print(f"{step}: group ids {groups[0]} | {groups[1]}; advantages are each group's z-scores across ranks")
print("PASS")
PY
