#!/usr/bin/env bash
# tools/bench/compare.py's GPU report on made-up runs where each figure is done by hand: the targets
# table (TRL / rayless-1 step time against 5x, completion tok/s, peak GPU memory reserved and allocated
# against TRL's), the runs table's GPU memory column, and the list of runs that did not finish (left
# out of both tables, not an error).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 - "$root/tools/bench" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import compare

name = "qwen2.5-0.5b-256-mu1-gc-bf16"

def run(tool, step, tok_s, allocated, reserved):
    return {"scenario": name, "tool": tool, "size": "qwen2.5-0.5b", "processes": 1, "threads_per_process": 4,
            "knobs": {"global_batch_size": 16}, "median_step_s": step, "mean_step_s": step,
            "generation_s_per_step": step / 2, "train_s_per_step": step / 2, "generation_share": 0.5,
            "completion_tokens_per_s": tok_s, "mean_completion_length": 256.0, "peak_rss_mb": 3000.0,
            "peak_gpu_allocated_mb": allocated, "peak_gpu_reserved_mb": reserved, "reward_by_step": [[1, -56.0]],
            "load_before": 1.0, "load_after": 1.0}

def cells(table):
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]

results = {"scenario_set": "gpu", "device": "cuda", "parameters": {"qwen2.5-0.5b": 494_032_768},
           "prompt_tokens_mean": 20.0, "machine": {"matmul_gflops": {"bfloat16": 790_000.0}},
           "runs": [run("trl", 30.0, 136.5, 9000.0, 12000.0), run("rayless-1", 5.0, 819.2, 6000.0, 9000.0),
                    {"scenario": "qwen2.5-0.5b-1024-mu2-gc-bf16", "tool": "rayless-1", "steps": 4, "steps_done": 1,
                     "error": "stopped at the deadline, after 200 s: mpirun ...\n--- log (tail)\n"}]}
table = compare.gpu_targets_table(results)
print(table)
rows = cells(table)
assert len(rows) == 2, rows  # the unfinished scenario is listed, with dashes
row = rows[0]
assert row["scenario"] == name, row
assert row["step time TRL / rayless-1"] == "6.00x", row            # 30 / 5
assert row["≥ 5x?"] == "yes", row
assert row["completion tok/s rayless-1 / TRL"] == "6.00x", row     # 819.2 / 136.5
assert row["peak GPU reserved rayless-1 / TRL"] == "0.75", row     # 9000 / 12000
assert row["peak GPU allocated rayless-1 / TRL"] == "0.67", row    # 6000 / 9000
assert row["reserved ≤ 1?"] == "yes", row
assert set(rows[1].values()) == {"qwen2.5-0.5b-1024-mu2-gc-bf16", "—"}, rows[1]

# more memory than TRL, and slower than 5x
results["runs"][1].update(median_step_s=10.0, peak_gpu_reserved_mb=13000.0)
row = cells(compare.gpu_targets_table(results))[0]
assert row["step time TRL / rayless-1"] == "3.00x" and row["≥ 5x?"] == "NO", row
assert row["peak GPU reserved rayless-1 / TRL"] == "1.08" and row["reserved ≤ 1?"] == "NO", row

# the runs table: "allocated / reserved" MiB per tool; the unfinished run is not a row there
runs = cells(compare.runs_table(results))
assert [r["tool"] for r in runs] == ["trl", "rayless-1"], runs
assert runs[0]["peak GPU MiB allocated / reserved"] == "9000 / 12000", runs[0]
# the CPU dry run of the GPU set: no GPU figures, dashes
for r in results["runs"][:2]:
    r["peak_gpu_allocated_mb"] = r["peak_gpu_reserved_mb"] = None
assert cells(compare.runs_table(results))[0]["peak GPU MiB allocated / reserved"] == "—"
assert cells(compare.gpu_targets_table(results))[0]["peak GPU reserved rayless-1 / TRL"] == "—"

unfinished = cells(compare.unfinished_markdown(results))
assert unfinished == [{"scenario": "qwen2.5-0.5b-1024-mu2-gc-bf16", "tool": "rayless-1", "steps logged": "1 of 4",
                       "why": "stopped at the deadline, after 200 s: mpirun ..."}], unfinished
print("gpu_targets_table, runs_table, unfinished_markdown: hand-computed figures agree")
PY
