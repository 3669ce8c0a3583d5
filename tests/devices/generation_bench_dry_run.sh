#!/usr/bin/env bash
# tools/gpu/generation_bench.sh's CPU dry run (tiny model, 1 and 4 rows x 8 tokens): what the GPU run
# hands back in $OUT is there and complete: generation.json names the commit and device, holds the
# rayless runs with every figure and the weight-streaming floor, and its table has a row per row count;
# the profiled run's summaries are there and headlined.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$(mktemp -d)}
export OUT
rm -rf "$OUT"
"$root/tools/gpu/generation_bench.sh" --dry-run --no-build
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("generation.json", "generation.md", "generation_rayless.json", "generation_bench.log"):
    assert os.path.exists(os.path.join(out, name)), f"no {name} in {out}"
r = json.load(open(os.path.join(out, "generation.json")))
assert r["commit"] and r["commit"] != "unknown", r["commit"]
assert r["device"] == "cpu", r["device"]
rayless = r["rayless"]
assert rayless["dtype"] == "float32" and rayless["tokens"] == 8 and rayless["floor_ms_per_decode_step"] > 0, rayless
assert [run["rows"] for run in rayless["runs"]] == [1, 4], rayless["runs"]
for run in rayless["runs"]:
    # equal lengths: every row generates every token, one slot per row, every slot busy
    assert run["tokens"] == 8 * run["rows"], run
    assert run["decode_steps"] == 8 and abs(run["slot_occupancy"] - 1.0) < 1e-9, run
    assert run["tokens_per_s"] > 0 and run["ms_per_decode_step"] > 0, run
assert [row["rows"] for row in r["table"]] == [1, 4], r["table"]
# the run with the grouped-query attention kernel off, matched to its row of the table
unfolded = r["rayless_attention_unfolded"]
assert [run["rows"] for run in unfolded["runs"]] == [4], unfolded
assert [row["unfolded_attention_ms_per_step"] is not None for row in r["table"]] == [False, True], r["table"]
# the profiled run: its summary file per setting, headlined in generation.json and in the table
profiles = r["profiles"]
assert [(p["rows"], p["cuda_graphs"]) for p in profiles] == [(4, "off")], profiles
for p in profiles:
    assert os.path.exists(os.path.join(out, p["file"])), p
    assert p["host_operator_calls_per_step"] > 0 and p["first"], p
assert "Under the profiler" in open(os.path.join(out, "generation.md")).read()
print("generation bench dry run: complete")
PY
