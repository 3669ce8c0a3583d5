#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, builds, then trains the tiny
# random-initialised model on the shipped prompts with the length reward, on 2 MPI ranks.
# Usage: ./tools/demo.sh [RUN_DIR] [extra rayless train args, e.g. --set train.max_steps=10]
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root_dir"
run_dir=${1:-runs/demo}
shift || true
ranks=${RAYLESS_DEMO_RANKS:-2}

# only the trainer: the demo runs nothing else (./tools/test.sh builds the tests and tools)
RAYLESS_BUILD_TARGETS=rayless ./tools/setup.sh

if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
rm -rf "$run_dir"
echo "demo: mpirun -np $ranks build/rayless train --config configs/demo.toml --output $run_dir $*"
mpirun -np "$ranks" --oversubscribe --bind-to none \
  build/rayless train --config configs/demo.toml --output "$run_dir" "$@"

# Mean reward of the first and last steps, from metrics.jsonl.
python3 - "$run_dir/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
rewards = [r["reward"] for r in rows if r.get("reward") is not None]
k = max(1, min(3, len(rewards) // 3))
first, last = sum(rewards[:k]) / k, sum(rewards[-k:]) / k
print(f"demo: {len(rows)} steps; mean reward of the first {k} steps {first:.3f}, of the last {k} steps {last:.3f}"
      f" ({'rising' if last > first else 'NOT rising'})")
PY
if [ -x tools/plot_reward.sh ]; then
  tools/plot_reward.sh "$run_dir" && echo "demo: plot in $run_dir/reward.png"
fi
