#!/usr/bin/env bash
# TRL 1.16's GRPOTrainer against `rayless train` on one GPU, as one prepared run: the same random
# Qwen2.5-0.5B-shaped model (tools/bench/models/qwen2.5-0.5b.json), prompts, length reward and batch
# geometry (G = 8, 16 completions per step), float32 weights under bfloat16 autocast and gradient
# checkpointing on both, TRL generating with transformers (use_vllm = false); 256- and 1,024-token
# completions at μ = 1 and 2 (compare.py's GPU_SCENARIOS). Printed per tool: step, generation and
# training time, completion tokens/s, peak GPU memory from each one's caching allocator (rayless's
# memory/gpu_peak_* metrics; TRL's torch.cuda.max_memory_allocated / max_memory_reserved), and the
# equal-settings table. tools/bench/compare.py does the work; this script sets up the machine for it.
#
# What comes back in $OUT (default gpu-compare-out/): compare_trl.json (commit, GPU, driver, CUDA,
# LibTorch, every setting of both tools, every figure; commit it under docs/gpu/), compare_trl.md (the
# tables), compare_trl.log, compare_trl_reward.png. The models and runs (gigabytes) go to $WORK
# (default $OUT/work), which the device run points outside $OUT.
#
#   tools/gpu/fetch_deps.sh       # here: Debian packages + wheels into .gpu-deps (checks the 64 MiB)
#   run (carry .gpu-deps, timeout_s 600): WORK=/tmp/gpu-compare tools/gpu/compare_trl.sh
#   tools/gpu/compare_trl.sh --dry-run [--no-build]   # here, on the CPU: the GPU set's knobs on the
#                                 # tiny model, both tools (ctest "gpu-compare-trl-dry-run")
# Other arguments go to compare.py run (e.g. --lengths 256, --mus 1). COMPARE_BUDGET_S (default 540):
# seconds from this script's start by which the last run must have ended; a run still going then is
# stopped and recorded as unfinished, later ones are skipped, so the command ends inside the device's
# 10 minutes. Expected on an H100 at the first GPU run's speeds: build 2 min, the 256-token scenarios
# 3 min, the 1,024-token ones 6-8 min: the budget cuts 1024-mu2 unless rayless's decoding is faster
# by then (docs/gpu.md).
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root_dir"
. tools/gpu/gpu_env.sh
gpu_script_args "tools/gpu/compare_trl.sh [--dry-run [--no-build]] [compare.py run arguments]" 1 "$@"
compare_args=("${passed_on[@]}")
OUT=${OUT:-$root_dir/gpu-compare-out}
WORK=${WORK:-$OUT/work}
budget_s=${COMPARE_BUDGET_S:-540}
mkdir -p "$OUT" "$WORK"
exec > >(tee "$OUT/compare_trl.log") 2>&1
start=$(date +%s)
say() { printf 'compare-trl: %s\n' "$*"; }
fail() { say "error: $*"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

if [ $dry_run = 1 ]; then
  say "dry run on the CPU: build/, the tiny model, the GPU set's knobs (compare.py --scenario-set gpu-dry-run)"
  build_dir=build scenario_set=gpu-dry-run threads=1
  if [ $build = 1 ]; then RAYLESS_BUILD_TARGETS="rayless rayless-bench" ./tools/setup.sh || fail "build failed"; fi
  # a Python with TRL: TRL_PYTHON, else the tools venv (tools/setup_tools_venv.sh), else .venv-trl
  python=${TRL_PYTHON:-}
  if [ -z "$python" ]; then
    for candidate in .venv-tools/bin/python .venv-trl/bin/python; do
      "$candidate" -c 'import trl, datasets' 2>/dev/null && { python=$candidate; break; }
    done
  fi
  if [ -z "$python" ]; then
    # without TRL, rayless's side still runs (with the build's own torch, for the machine's rates),
    # and TRL's arguments are still built and checked (the table)
    python=.venv/bin/python
    compare_args+=(--tools rayless-1)
    say "no Python with trl and datasets here (TRL_PYTHON, .venv-tools, .venv-trl): TRL's side is checked as arguments only"
  fi
else
  build_dir=build-gpu scenario_set=gpu threads=4 python=python3
  use_carried_packages || fail "the carried Debian packages"
  use_cuda_and_nccl || fail "CUDA and NCCL"
  if [ $build = 1 ]; then build_for_gpu "$build_dir" rayless rayless-bench || fail "build failed"; fi
  use_carried_wheels || fail "the carried wheels"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
say "python: $python ($("$python" -c 'import sys; print(sys.version.split()[0])'))"

bench_out=$WORK/bench
rm -rf "$bench_out"
# what is left of the budget, less a minute for stopping a run and writing the report
deadline_s=$((budget_s - ($(date +%s) - start) - 60))
say "runs must end within ${deadline_s} s (COMPARE_BUDGET_S=$budget_s from the start)"
"$python" tools/bench/compare.py run --scenario-set "$scenario_set" --out "$bench_out" --rayless "$build_dir/rayless" \
  --threads "$threads" --keep-going --deadline-s "$deadline_s" "${compare_args[@]}"
run_rc=$?
[ -f "$bench_out/results.json" ] || fail "compare.py wrote no results.json (exit $run_rc)"
"$python" tools/bench/compare.py report --out "$bench_out" --plot "$OUT/compare_trl_reward.png" || fail "report failed"
cp "$bench_out/results.json" "$OUT/compare_trl.json"
cp "$bench_out/table.md" "$OUT/compare_trl.md"
say "results: $OUT/compare_trl.json, $OUT/compare_trl.md; done in $(( $(date +%s) - start )) s (compare.py run exit $run_rc)"
exit $run_rc
