#!/usr/bin/env bash
# tools/gpu/compare_trl.sh's CPU dry run, end to end: the GPU side-by-side's knobs on the tiny model
# (compare.py --scenario-set gpu-dry-run: μ = 2, gradient checkpointing and bf16 autocast on both, 4
# steps), TRL's GRPOTrainer (from .venv-tools, tools/setup_tools_venv.sh; TRL_PYTHON overrides) and
# `rayless train`, then the report. Checks what the GPU run hands back in $OUT: the results JSON names
# the commit, versions and machine, holds every setting of both tools (rayless's resolved config, TRL's
# whole GRPOConfig with use_vllm off) and every figure of both runs, and the tables. Without a Python
# that has TRL, rayless's side runs alone and TRL's arguments are only built and checked (it says so).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$(mktemp -d)}
export OUT
rm -rf "$OUT"
"$root/tools/gpu/compare_trl.sh" --dry-run --no-build
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("compare_trl.json", "compare_trl.md", "compare_trl.log"):
    assert os.path.exists(os.path.join(out, name)), f"no {name} in {out}"
r = json.load(open(os.path.join(out, "compare_trl.json")))
assert r["scenario_set"] == "gpu-dry-run" and r["device"] == "cpu", (r["scenario_set"], r["device"])
assert r["commit"] and r["commit"] != "unknown", r["commit"]
assert r["versions"]["libtorch"] and r["versions"]["rayless"], r["versions"]
assert not [s for s in r["equal_settings"] if s["equal"] == "DIFFERS"], "a knob differs between the tools"
settings = {s["setting"]: s for s in r["equal_settings"]}
for knob, value in (("gradient checkpointing", "true"), ("bf16 autocast", "true"), ("device", "cpu")):
    assert settings[knob]["trl"] == settings[knob]["rayless"] == value, settings[knob]
figures = ("median_step_s", "generation_s_per_step", "train_s_per_step", "completion_tokens_per_s", "peak_rss_mb")
runs = {run["tool"]: run for run in r["runs"]}
tools = ["rayless-1"] + (["trl"] if r["versions"]["trl"] != "not installed" else [])
for tool in tools:
    run = runs[tool]
    assert "error" not in run, f"{tool}: {run.get('error')}"
    assert all(run[f] > 0 for f in figures), {f: run[f] for f in figures}
    assert run["peak_gpu_allocated_mb"] is None and run["peak_gpu_reserved_mb"] is None, "GPU memory on the CPU"
    assert len(run["step_time_by_step"]) == 4, run["step_time_by_step"]
ray = runs["rayless-1"]["resolved_config"]
assert ray["model"]["device"] == "cpu" and ray["train"]["bf16"] and ray["train"]["gradient_checkpointing"], ray
assert ray["grpo"]["num_iterations"] == 2 and ray["checkpoint"]["save_on_signal"] is False, ray
if "trl" in tools:
    grpo = runs["trl"]["run_info"]["grpo_config"]
    assert grpo["use_vllm"] is False and grpo["bf16"] is True and grpo["gradient_checkpointing"] is True, grpo
    assert grpo["num_iterations"] == 2 and grpo["use_cpu"] is True, grpo
    print("TRL side: ran (GRPOTrainer, trl", r["versions"]["trl"] + ")")
else:
    assert "trl" not in runs
    print("TRL side: arguments only (no Python with trl here)")
table = open(os.path.join(out, "compare_trl.md")).read()
assert "Targets on the GPU" in table and "peak GPU MiB allocated / reserved" in table, table
print(f"compare_trl.sh --dry-run: {len(tools)} tool(s) ran 4 steps each; results JSON and tables complete")
PY
