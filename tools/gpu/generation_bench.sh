#!/usr/bin/env bash
# The GPU generation benchmark of issue 47, as one prepared run: the Qwen2.5-0.5B shape (random
# weights) in bfloat16 at 1, 16, 64 and 256 rows x 256 tokens through rayless's generation engine
# (rayless-bench generation: tokens/s, ms per decode step, occupancy, host syncs per token, and the
# weight-streaming floor of a step), next to transformers' generate with a static cache on the same
# device in the same run (tools/gpu/transformers_generate.py). Results: $OUT/generation.json (commit,
# device, settings, both tools' figures, the floor) and $OUT/generation.md (the table), for docs/gpu/.
# rayless runs with generation.cuda_graphs = auto (graphs in a CUDA build; the log's start-up line says),
# and again at 16 and 256 rows with its grouped-query attention kernel off (the attention's share).
# Last, a shorter run at 16 and 256 rows under LibTorch's profiler (rayless-bench generation --profile):
# the device's busy share, kernels and host waits per decode step, the kernels that take the time
# ($OUT/profiles/, summarised in generation.json and generation.md).
#
#   run (carry .gpu-deps): tools/gpu/generation_bench.sh          # on the GPU machine, < 8 minutes
#   tools/gpu/generation_bench.sh --dry-run [--no-build]          # here, on the CPU: tiny model,
#                                                                 # float32, 1 and 4 rows x 8 tokens
#                                                                 # (ctest "gpu-generation-bench-dry-run")
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root_dir"
. tools/gpu/gpu_env.sh
gpu_script_args "tools/gpu/generation_bench.sh [--dry-run [--no-build]]" 0 "$@"
OUT=${OUT:-$root_dir/gpu-generation-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/generation_bench.log") 2>&1
say() { printf 'generation-bench: %s\n' "$*"; }

if [ $dry_run = 1 ]; then
  build_dir=build device=cpu dtype=float32 model_json=tools/bench/models/tiny.json rows=1,4 tokens=8 sync=1 graphs=off
  unfolded_rows=4 unfolded_graphs=off profile_rows=4 profile_tokens=8 profile_graphs=off
  [ $build = 1 ] && { ./tools/setup.sh || exit 1; }
else
  build_dir=build-gpu device=cuda dtype=bfloat16 model_json=tools/bench/models/qwen2.5-0.5b.json rows=1,16,64,256 tokens=256 sync=8 graphs=off,on
  unfolded_rows=16,256 unfolded_graphs=on profile_rows=16,256 profile_tokens=64 profile_graphs=off,on
  use_carried_packages || exit 1
  use_cuda_and_nccl || exit 1
  [ $build = 1 ] && { build_for_gpu "$build_dir" rayless-bench || exit 1; }
fi

# equal lengths (--short = --tokens): every row generates all its tokens, as transformers does with
# min_new_tokens; one run after a warm-up per setting
say "rayless: $model_json, $device, $dtype, rows $rows x $tokens tokens"
timeout 420 "$build_dir/rayless-bench" generation --model-json "$model_json" --device "$device" --dtype "$dtype" \
  --rows "$rows" --tokens "$tokens" --short "$tokens" --engines new --sync-intervals "$sync" --cuda-graphs "$graphs" --repeats 1 \
  --json "$OUT/generation_rayless.json"
rayless_rc=$?
say "rayless-bench exit $rayless_rc"
# the attention's share: the same engine with the CUDA backend's grouped-query attention switched off
# (folded_gqa_attention, docs/kernels.md), where LibTorch's math kernel repeats the keys per query head
say "rayless, RAYLESS_KERNEL_FOLDED_GQA_ATTENTION=0: rows $unfolded_rows, cuda_graphs $unfolded_graphs"
RAYLESS_KERNEL_FOLDED_GQA_ATTENTION=0 timeout 150 "$build_dir/rayless-bench" generation --model-json "$model_json" \
  --device "$device" --dtype "$dtype" --rows "$unfolded_rows" --tokens "$tokens" --short "$tokens" --engines new \
  --sync-intervals "$sync" --cuda-graphs "$unfolded_graphs" --repeats 1 --json "$OUT/generation_rayless_unfolded.json"
say "rayless-bench (attention unfolded) exit $?"

# a Python with torch and transformers: TRANSFORMERS_PYTHON, else python3 (the GPU machine's has both),
# else the tools venv (tools/setup_tools_venv.sh)
python=${TRANSFORMERS_PYTHON:-}
for candidate in python3 .venv-tools/bin/python; do
  [ -z "$python" ] && "$candidate" -c 'import torch, transformers' 2>/dev/null && python=$candidate
done
if [ -n "$python" ]; then
  timeout 300 "$python" tools/gpu/transformers_generate.py --model-json "$model_json" --device "$device" --dtype "$dtype" \
    --rows "$rows" --tokens "$tokens" --json "$OUT/generation_transformers.json"
  say "transformers exit $?"
else
  say "no Python with torch and transformers here (TRANSFORMERS_PYTHON, python3, .venv-tools): the transformers side is left out"
fi

# where a decode step's time goes: one more run of each setting under the profiler (not timed)
say "rayless under the profiler: rows $profile_rows x $profile_tokens tokens, cuda_graphs $profile_graphs"
timeout 150 "$build_dir/rayless-bench" generation --model-json "$model_json" --device "$device" --dtype "$dtype" \
  --rows "$profile_rows" --tokens "$profile_tokens" --short "$profile_tokens" --engines new --sync-intervals "$sync" \
  --cuda-graphs "$profile_graphs" --repeats 1 --profile "$OUT/profiles" --json "$OUT/generation_profiled.json"
say "rayless-bench (profiled) exit $?"

# the commit: git's, or the one fetch_deps.sh recorded (the GPU machine's copy has no .git)
commit=$(git rev-parse HEAD 2>/dev/null || cat .gpu-deps/source-commit 2>/dev/null || echo unknown)
python3 - "$OUT" "$device" "$commit" <<'PY'
import json, os, subprocess, sys
out, device, commit = sys.argv[1:]
def load(name):
    path = os.path.join(out, name)
    return json.load(open(path)) if os.path.exists(path) else None
rayless, hf = load("generation_rayless.json"), load("generation_transformers.json")
unfolded = load("generation_rayless_unfolded.json")
profiled = load("generation_profiled.json")
gpu = "cpu"
if device == "cuda":
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        gpu = "unknown"
result = {"commit": commit, "device": gpu, "rayless": rayless, "transformers": hf, "rayless_attention_unfolded": unfolded}
rows = []
if rayless:
    floor = rayless["floor_ms_per_decode_step"]
    for run in rayless["runs"]:
        theirs = next((r for r in (hf or {}).get("runs", []) if r["rows"] == run["rows"]), None)
        plain = next((r for r in (unfolded or {}).get("runs", [])
                      if r["rows"] == run["rows"] and r["cuda_graphs"] == run["cuda_graphs"]), None)
        rows.append({"rows": run["rows"], "cuda_graphs": run["cuda_graphs"], "rayless_tokens_per_s": run["tokens_per_s"],
                     "rayless_ms_per_step": run["ms_per_decode_step"], "floor_ms_per_step": floor,
                     "unfolded_attention_ms_per_step": plain["ms_per_decode_step"] if plain else None,
                     "transformers_tokens_per_s": theirs["tokens_per_s"] if theirs else None,
                     "transformers_ms_per_step": theirs["ms_per_decode_step"] if theirs else None})
result["table"] = rows
# the profiled runs' headlines, with each run's first three kernels (or host operators, on the CPU)
profiles = []
for run in (profiled or {}).get("runs", []):
    if "profile" not in run:
        continue
    summary = json.load(open(run["profile"]["file"]))
    first = summary.get("top_kernels") or summary["top_level_operators"]
    profiles.append({"rows": run["rows"], "cuda_graphs": run["cuda_graphs"], "ms_per_step_profiled": run["ms_per_decode_step"],
                     "file": os.path.relpath(run["profile"]["file"], out),
                     **{k: v for k, v in run["profile"].items() if k != "file"},
                     "first": [{"name": f["name"][:80], "share": f["share"]} for f in first[:3]]})
result["profiles"] = profiles
json.dump(result, open(os.path.join(out, "generation.json"), "w"), indent=2)
with open(os.path.join(out, "generation.md"), "w") as md:
    md.write(f"commit {commit}, device {gpu}\n\n")
    md.write("| rows | rayless CUDA graphs | rayless tokens/s | rayless ms/step | ms/step, attention unfolded | transformers tokens/s | transformers ms/step | floor ms/step |\n")
    md.write("|---|---|---|---|---|---|---|---|\n")
    fmt = lambda v, f: "n/a" if v is None else format(v, f)
    for r in rows:
        md.write(f"| {r['rows']} | {r['cuda_graphs']} | {fmt(r['rayless_tokens_per_s'], '.0f')} | {fmt(r['rayless_ms_per_step'], '.2f')} | "
                 f"{fmt(r['unfolded_attention_ms_per_step'], '.2f')} | "
                 f"{fmt(r['transformers_tokens_per_s'], '.0f')} | {fmt(r['transformers_ms_per_step'], '.2f')} | "
                 f"{fmt(r['floor_ms_per_step'], '.3f')} |\n")
    if profiles:
        md.write("\nUnder the profiler (shorter runs; its own overhead included):\n\n")
        md.write("| rows | CUDA graphs | device busy | kernels per step | host waits per step | host operators per step | first three |\n")
        md.write("|---|---|---|---|---|---|---|\n")
        for p in profiles:
            busy = "n/a" if "device_busy_share" not in p else f"{100 * p['device_busy_share']:.0f} %"
            first = "; ".join(f"{f['name']} {100 * f['share']:.0f} %" for f in p["first"])
            md.write(f"| {p['rows']} | {p['cuda_graphs']} | {busy} | {fmt(p.get('kernels_per_step'), '.0f')} | "
                     f"{fmt(p.get('host_waits_per_step'), '.2f')} | {p['host_operator_calls_per_step']:.0f} | {first} |\n")
print(open(os.path.join(out, "generation.md")).read())
PY
exit $rayless_rc
