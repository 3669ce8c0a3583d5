#!/usr/bin/env bash
# tools/bench/compare.py's machine floor (machine_floor_s), the lower bound its targets table sets
# against a third of TRL's step, on made-up rates where the sum can be done by hand: a second way to
# the same number, and the parts that must change it (checkpointing, bfloat16, μ) each checked.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 - "$root/tools/bench" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import compare

P = 1_000_000
machine = {"matmul_gflops": {"float32": 100.0, "bfloat16": 800.0}, "memory_bandwidth_gbs": 10.0}
def run(name, mu=1, gc=False, completion=20.0):
    return {"scenario": name, "mean_completion_length": completion,
            "knobs": {"global_batch_size": 16, "num_iterations": mu, "gradient_checkpointing": gc}}
def near(a, b):
    assert abs(a - b) <= 1e-12 * max(1.0, abs(b)), (a, b)

# float32: train 6P x 16 x (10 + 20) tokens at 100 GFLOP/s; 20 decode steps streaming 4 MB at 10 GB/s
# (8 ms) against 2P x 16 x 20 at 100 GFLOP/s (6.4 ms): the streaming; AdamW 28 MB at 10 GB/s
train = 6 * P * 16 * 30 / 100e9
near(compare.machine_floor_s(run("s-32-mu1"), P, 10.0, machine), train + 20 * 4e6 / 10e9 + 28e6 / 10e9)
# gradient checkpointing: 8P per trained token
near(compare.machine_floor_s(run("s-32-mu1-gc", gc=True), P, 10.0, machine),
     8 * P * 16 * 30 / 100e9 + 20 * 4e6 / 10e9 + 28e6 / 10e9)
# bfloat16: its matmul rate, 2 bytes per weight; generation shared by mu = 4 optimizer steps
near(compare.machine_floor_s(run("s-32-mu4-bf16", mu=4), P, 10.0, machine),
     6 * P * 16 * 30 / 800e9 + 20 * 2e6 / 10e9 / 4 + 28e6 / 10e9)
# compute-bound decoding (a slow matmul): 2P per generated token at the matmul rate, not the streaming
slow = {"matmul_gflops": {"float32": 1.0}, "memory_bandwidth_gbs": 10.0}
near(compare.machine_floor_s(run("s-32-mu1"), P, 10.0, slow), 6 * P * 16 * 30 / 1e9 + 2 * P * 16 * 20 / 1e9 + 28e6 / 10e9)
print("machine_floor_s: four hand-computed cases agree")
PY
