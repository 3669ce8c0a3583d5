#!/usr/bin/env bash
# rayless vs TRL's GRPOTrainer, side by side on one shared setup (CPU). The one command behind the
# "Throughput and memory against TRL and the machine" section of docs/benchmarks.md:
#
#   tools/bench/compare.sh [--threads N] [--scenarios NAME,...] [--sizes tiny,small] [--mus 1,4]
#                          [--tools trl,rayless-1-padded,rayless-1,rayless-2]
#
# It creates .venv-trl (trl, transformers, torch==2.13.0 CPU, matplotlib) when missing, builds
# rayless when missing, writes the shared models with `rayless-bench init-model`, runs every scenario
# (default all: tiny ~5M and small ~53M parameters; 32-token completions at mu = 1 and 4; the realistic
# small model with G = 8 and 256-token completions at mu = 1 and 4; two with gradient checkpointing
# on for both tools, suffixed -gc; four with bfloat16 autocast on for both, suffixed -bf16) with every
# tool (TRL, rayless 1 rank with and without the packed log-prob pass, rayless 2 ranks), and writes
# runs/bench/results.json, runs/bench/table.md and docs/img/bench_trl_reward.png.
# --sizes and --mus filter the scenarios. To see the equal-settings table and the list of runs without
# running anything: python3 tools/bench/compare.py run --dry-run (any Python >= 3.11, no packages).
# Several full runs: compare.py report --runs DIR1,DIR2,DIR3 prints the median and spread of step time.
# Environment: RAYLESS_BIN (a built rayless; default $RAYLESS_BUILD_DIR/rayless, RAYLESS_BUILD_DIR
# defaults to build), BENCH_OUT (default runs/bench), BENCH_PLOT (default docs/img/bench_trl_reward.png).
# The four 32-token scenarios took about 9 minutes on 2 idle cores; tiny-32-mu1 and small-256-mu1 with
# trl, rayless-1 and rayless-2 took 5.8 minutes (TRL: 26 s per 256-token step).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
say() { printf 'bench: %s\n' "$*"; }

venv=.venv-trl
if ! "$venv/bin/python" -c 'import trl, transformers, matplotlib' 2>/dev/null; then
  say "creating $venv (trl, transformers, torch==2.13.0, matplotlib)"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q trl transformers torch==2.13.0 matplotlib 2>&1 | grep -v '^WARNING: Location' || true
  "$venv/bin/python" -c 'import trl, transformers, matplotlib' || { say "error: pip install into $venv failed"; exit 2; }
fi

build_dir=${RAYLESS_BUILD_DIR:-build}
rayless=${RAYLESS_BIN:-$build_dir/rayless}
if [ ! -x "$rayless" ] || [ ! -x "$(dirname "$rayless")/rayless-bench" ]; then
  say "building rayless and rayless-bench in $build_dir"
  if [ -f "$build_dir/CMakeCache.txt" ]; then
    cmake --build "$build_dir" --target rayless rayless-bench -j2
  else
    RAYLESS_BUILD_DIR=$build_dir ./tools/setup.sh
  fi
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out=${BENCH_OUT:-runs/bench}
plot=${BENCH_PLOT:-docs/img/bench_trl_reward.png}
say "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$venv/bin/python" tools/bench/compare.py run --out "$out" --rayless "$rayless" "$@"
case " $* " in *" --dry-run "*) exit 0 ;; esac  # nothing ran: nothing to report
"$venv/bin/python" tools/bench/compare.py report --out "$out" --plot "$plot"
say "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
