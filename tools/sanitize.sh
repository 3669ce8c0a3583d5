#!/usr/bin/env bash
# ASan + UBSan (issue 17 §1; docs/reliability.md): builds rayless, its tests and the fuzz targets
# with clang into build-sanitize/ and runs under the sanitizers: every unit test, the MPI tests at
# np 2, and every fuzz target over its corpus and regression inputs (tests/data/fuzz/). Any report
# fails the run. Reports that are not rayless's (LibTorch, Open MPI internals) are suppressed in
# tools/sanitizers/{asan,ubsan,lsan}.supp, each with a line saying why.
#
# usage: tools/sanitize.sh [CTEST_ARGS...]   (default: the selection below; e.g. -R '^chat:' for one module)
#        tools/sanitize.sh --build-only        install clang, configure and build; run nothing
#        tools/sanitize.sh --no-build [ARGS]   run the tests on what is built (tools/test.sh builds it
#                                              beside its own ctest run, at nice 19, then calls this)
# Needs clang (installed with apt as root; else from the environment). RAYLESS_SANITIZE_BUILD_DIR
# (default build-sanitize).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/sanitizers/lib.sh"
cd "$hardening_root"
start=$(date +%s)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_rmaps_base_oversubscribe=1

mode=all
case "${1:-}" in
  --build-only) mode=build; shift ;;
  --no-build) mode=test; shift ;;
esac
ensure_clang
[ "$mode" = test ] || build_sanitized
if [ "$mode" = build ]; then hsay "built $sanitize_build_dir in $(( $(date +%s) - start )) s"; exit 0; fi
[ -f "$sanitize_build_dir/CTestTestfile.cmake" ] || hdie "$sanitize_build_dir is not built (run tools/sanitize.sh without --no-build)"
sanitizer_env
if [ $# -gt 0 ]; then
  slow_unwind_env
  hsay "ctest under ASan + UBSan: $*"
  ctest --test-dir "$sanitize_build_dir" -j "$(nproc)" --output-on-failure --timeout 900 "$@"
else
  # 1. unit tests ("<module>:<test case>", Catch2) and fuzz replays, MPI not started: fast unwinding
  hsay "ctest under ASan + UBSan: unit tests and fuzz corpus replays"
  ctest --test-dir "$sanitize_build_dir" -j "$(nproc)" --output-on-failure --timeout 900 \
    -R '^[a-z_]+:[^ ]|^fuzz-replay-' -E 'refcheck|fuzz-replay-rollout_file'
  # 2. programs that start MPI (MPI tests at np 2, refcheck) and the HDF5 reader's replay: the leak
  #    check needs full stacks to tell Open MPI's and libhdf5's own leaks (lsan.supp) from ours
  slow_unwind_env
  hsay "ctest under ASan + UBSan: MPI tests at np 2, refcheck, the rollout-file replay"
  ctest --test-dir "$sanitize_build_dir" -j "$(nproc)" --output-on-failure --timeout 900 -R 'mpi-np2$|refcheck|fuzz-replay-rollout_file'
fi
hsay "finished in $(( $(date +%s) - start )) s: no sanitizer report"
