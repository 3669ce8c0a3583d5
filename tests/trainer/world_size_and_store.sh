#!/usr/bin/env bash
# (1) A checkpoint at a generation-cycle boundary resumes with another world size (prompts reshard);
# one taken mid-cycle is refused with exit 2 and a message naming the rank counts.
# (2) The store a 2-rank run wrote: advantages recomputed from rewards_per_func equal the stored ones.
# usage: world_size_and_store.sh RAYLESS TRAIN_UNTIL_SIGNAL
set -uo pipefail
rayless=$1; until_signal=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-ws.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
mpi() { mpirun -np "$1" --oversubscribe --bind-to none "${@:2}"; }
common=(--config configs/ci-small.toml --set grpo.num_iterations=1 --set grpo.steps_per_generation=1)
mpi 2 "$rayless" train "${common[@]}" --output "$work/a" --set train.max_steps=2 > "$work/a.log" 2>&1 || { cat "$work/a.log"; exit 1; }
"$rayless" train "${common[@]}" --output "$work/a" --set train.max_steps=4 --resume auto > "$work/b.log" 2>&1 || { cat "$work/b.log"; exit 1; }
grep -q "resumed from .*step-00000002" "$work/b.log" && [ "$(cat "$work/a/checkpoints/latest")" = step-00000004 ] \
  || { cat "$work/b.log"; echo "FAIL: 2 -> 1 rank resume at a cycle boundary"; exit 1; }
echo "PASS: a 2-rank checkpoint at a cycle boundary resumed on 1 rank to step 4"

mpi 2 "$until_signal" --signal-at-micro-step 1 --config configs/ci-small.toml --output "$work/c" > "$work/c.log" 2>&1
[ $? -eq 3 ] || { cat "$work/c.log"; echo "FAIL: signal run"; exit 1; }
"$rayless" train --config configs/ci-small.toml --output "$work/c" --resume auto > "$work/d.log" 2>&1
rc=$?
cat "$work/d.log"
[ $rc -eq 2 ] && grep -q "taken by 2 ranks in the middle of a generation cycle; resume it with 2 ranks (now 1)" "$work/d.log" \
  || { echo "FAIL: mid-cycle resume with another world size must be refused (exit 2), got $rc"; exit 1; }
echo "PASS: mid-cycle checkpoint refused on another world size"

/usr/bin/python3 - "$work/a/rollouts/index.h5" <<'PY'
import sys, h5py, numpy as np
# recompute TRL's advantages (sum_then_normalize, scale_rewards = group) from the stored per-function
# rewards of all ranks, and compare with what each rank stored
with h5py.File(sys.argv[1], "r") as f:
    for step in sorted(f.keys()):
        ranks = sorted(f[step].keys())
        rpf = np.concatenate([f[step][r]["rewards_per_func"][()] for r in ranks])
        adv = np.concatenate([f[step][r]["advantages"][()] for r in ranks])
        G = int(f[step][ranks[0]].attrs["num_generations"])
        r = np.nansum(rpf, axis=1).reshape(-1, G)
        expected = ((r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-4)).reshape(-1)
        err = np.abs(expected - adv).max()
        assert err < 1e-5, (step, err)
        print(f"{step}: {len(ranks)} ranks, {len(adv)} advantages recomputed, max error {err:.2e}")
print("PASS: stored advantages match a recomputation from rewards_per_func")
PY
