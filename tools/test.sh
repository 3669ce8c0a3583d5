#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds (tools/setup.sh), then runs ctest in
# parallel, and the hardening checks (tools/sanitize.sh, tools/fuzz.sh). Extra arguments go to ctest
# (e.g. ./tools/test.sh -R grpo) and skip the hardening checks.
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root_dir"
start=$(date +%s)
build_dir=${RAYLESS_BUILD_DIR:-build}

if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_rmaps_base_oversubscribe=1

# A full disk fails tests far from the cause (torch's writer, HDF5, Slurm): say it first. A clean
# clone's whole run peaked at 9.1 GiB more in use than at its start (builds, build-sanitize/, fuzzers,
# the venvs, test scratch; sampled every 20 s on 2026-12-02), hence 10 GiB.
check_free_space() {
  local dir=$1 need_gib=$2 free_kib
  case $need_gib in
    '' | *[!0-9]*) echo "test: error: RAYLESS_TEST_MIN_FREE_GIB=$need_gib: expected a whole number of GiB" >&2; exit 2 ;;
  esac
  free_kib=$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 {print $4}')
  [ -n "$free_kib" ] || return 0
  echo "test: $((free_kib / 1024 / 1024)) GiB free for $dir"
  if [ "$free_kib" -lt $((need_gib * 1024 * 1024)) ]; then
    echo "test: error: only $((free_kib / 1024)) MiB free on the file system of $dir; the suite needs about" \
         "$need_gib GiB there (set RAYLESS_TEST_MIN_FREE_GIB to change the limit)" >&2
    exit 1
  fi
}
check_free_space "$root_dir" "${RAYLESS_TEST_MIN_FREE_GIB:-10}"
check_free_space "${TMPDIR:-/tmp}" 1

./tools/setup.sh

# The NCCL backend is compiled (not linked, nothing run) against nccl.h with the CPU LibTorch, so
# the GPU path cannot rot unseen on machines without a GPU.
if command -v nvcc >/dev/null 2>&1 || [ -n "${RAYLESS_NCCL_INCLUDE_DIR:-}" ]; then
  ./tools/nccl_compile_check.sh
  ./tools/cuda_graphs_compile_check.sh
else
  echo "test: no CUDA toolkit here: NCCL compile check skipped"
fi

# TensorBoard's own event-file loader for the TensorBoard test (a tools venv; without it that part of
# the test says SKIP)
./tools/setup_tools_venv.sh || true

# Services some tests need (a single-node Slurm); stopped again on exit.
if [ -x tools/slurm/start.sh ] && [ "${RAYLESS_SKIP_SLURM:-0}" != 1 ]; then
  if tools/slurm/start.sh; then
    trap 'tools/slurm/stop.sh || true' EXIT
    export RAYLESS_SLURM_UP=1
  else
    echo "test: local Slurm could not start: Slurm tests will fail" >&2
  fi
fi

# The two-node cluster (network namespaces; tests labelled multinode); down again on exit.
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && [ "${RAYLESS_SKIP_SLURM:-0}" != 1 ]; then
  if tools/slurm/start_multinode.sh; then
    trap 'tools/slurm/stop_multinode.sh || true; tools/slurm/stop.sh || true' EXIT
    export RAYLESS_SLURM_MULTINODE_UP=1
  else
    echo "test: the two-node Slurm could not start: multinode tests will say SKIP" >&2
  fi
fi

# The hardening checks (docs/reliability.md): ASan + UBSan and the fuzz targets, in build-sanitize/
# with clang. The suite below leaves most of the CPU idle (it waits on MPI jobs, Slurm and time
# limits), so the sanitizer build runs beside it at nice 19; its tests and a short fuzzing run follow.
# RAYLESS_SKIP_HARDENING=1 skips them (as does passing ctest arguments: a partial run).
hardening_pid=""
if [ "${RAYLESS_SKIP_HARDENING:-0}" != 1 ] && [ $# -eq 0 ]; then
  nice -n 19 ./tools/sanitize.sh --build-only > "$build_dir/sanitize-build.log" 2>&1 &
  hardening_pid=$!
  echo "test: building build-sanitize/ beside the tests at nice 19 (log: $build_dir/sanitize-build.log)"
fi

# The Slurm and two-node tests (labels slurm, multinode) mostly wait: on sbatch, on Slurm's time
# limits and requeues, on cluster restarts. Each cluster's tests take a lock and both slots, so in
# the main run they held the 2 cores idle for about 10 minutes; they run in a second ctest beside it
# instead (its log is printed when the main run ends).
slurm_pid=""
main_selection=()
if [ $# -eq 0 ]; then
  slurm_log=$build_dir/ctest-slurm.log
  ctest --test-dir "$build_dir" -L '^(slurm|multinode)$' -j 4 --output-on-failure --timeout 600 > "$slurm_log" 2>&1 &
  slurm_pid=$!
  main_selection=(-LE '^(slurm|multinode)$')
  echo "test: the slurm and multinode tests run beside the others (log: $slurm_log)"
fi

ctest_rc=0
ctest --test-dir "$build_dir" -j "$(nproc)" --output-on-failure --timeout 600 "${main_selection[@]}" "$@" || ctest_rc=$?
if [ -n "$slurm_pid" ]; then
  slurm_rc=0
  wait "$slurm_pid" || slurm_rc=$?
  echo "test: ===== the slurm and multinode tests ($slurm_log) ====="
  cat "$slurm_log"
  [ "$slurm_rc" -eq 0 ] || ctest_rc=$slurm_rc
fi
echo "test: ctest finished in $(( $(date +%s) - start )) s (exit $ctest_rc)"

hardening_rc=0
if [ -n "$hardening_pid" ]; then
  if ! wait "$hardening_pid"; then
    tail -30 "$build_dir/sanitize-build.log"
    echo "test: the sanitizer build failed (above; missing clang is named there)" >&2
    hardening_rc=1
  else
    ./tools/sanitize.sh --no-build || hardening_rc=$?
    # every fuzz target briefly from its corpus (their corpus replays ran under the sanitizers above)
    RAYLESS_FUZZ_NO_BUILD=1 ./tools/fuzz.sh all "${RAYLESS_CI_FUZZ_SECONDS:-20}" || hardening_rc=$?
  fi
fi
echo "test: finished in $(( $(date +%s) - start )) s"
[ "$ctest_rc" -eq 0 ] && [ "$hardening_rc" -eq 0 ]
