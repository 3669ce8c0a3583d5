#!/usr/bin/env bash
# tools/bench/compare.py's targets table on made-up runs where each ratio is done by hand: TRL / rayless-1
# step time, peak RSS, 1 rank / 2 ranks step time, and 2 ranks / 1 rank completion tok/s with the two
# mean completion lengths (the ranks sample other completions than one rank, so the step-time ratio
# alone compares unequal work).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 - "$root/tools/bench" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import compare

def run(tool, step, rss, tok_s, length):
    return {"scenario": "small-256-mu4", "tool": tool, "size": "small", "median_step_s": step, "peak_rss_mb": rss,
            "completion_tokens_per_s": tok_s, "mean_completion_length": length}
results = {"parameters": {"small": 1_000_000}, "prompt_tokens_mean": 10.0,
           "runs": [run("trl", 12.0, 4000.0, 40.0, 100.0), run("rayless-1", 4.0, 1000.0, 50.0, 80.0),
                    run("rayless-2", 3.2, 900.0, 85.0, 150.0)]}
table = compare.targets_table(results)
row = [c.strip() for c in table.splitlines()[-1].strip("|").split("|")]
header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
cell = dict(zip(header, row))
print(table)
assert cell["step time TRL / rayless-1"] == "3.00x", cell
assert cell["≥ 3.0x?"] == "yes", cell
assert cell["peak RSS rayless-1 / TRL"] == "0.25", cell
assert cell["step time 1 rank / 2 ranks"] == "1.25x", cell          # 4.0 / 3.2
assert cell["≥ 1.8x?"] == "NO", cell
# 85 / 50 tok/s = 1.70x, mean completion lengths 80 (1 rank) and 150 (2 ranks)
assert cell["completion tok/s 2 ranks / 1 rank (mean completion length 1 / 2)"] == "1.70x (80 / 150)", cell
# without the 2-rank run: a dash, not an error
results["runs"].pop()
row = [c.strip() for c in compare.targets_table(results).splitlines()[-1].strip("|").split("|")]
assert row[-1] == "—" and row[-3] == "—", row
print("targets_table: hand-computed ratios agree")
PY
