# Shared by tools/sanitize.sh and tools/fuzz.sh: sourced, not run. One clang build directory
# (build-sanitize/, RAYLESS_SANITIZE=ON and RAYLESS_FUZZ=ON) serves both: ASan + UBSan everywhere
# rayless compiles, libFuzzer's coverage in the same objects.
hardening_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sanitize_build_dir=${RAYLESS_SANITIZE_BUILD_DIR:-build-sanitize}

hsay() { printf '%s: %s\n' "$(basename "$0" .sh)" "$*"; }
hdie() { printf '%s: error: %s\n' "$(basename "$0" .sh)" "$*" >&2; exit 2; }

# clang, its sanitizer and libFuzzer runtimes, llvm-symbolizer: from apt as root on Debian, else from
# the environment (module load llvm), naming what is missing
ensure_clang() {
  local v packages=(clang-14 libclang-rt-14-dev llvm-14)
  if ! command -v clang++-14 >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null &&
     [ "${RAYLESS_NO_APT:-0}" != 1 ]; then
    hsay "installing ${packages[*]} (clang with ASan, UBSan and libFuzzer)"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${packages[@]}" >/dev/null; }; } ||
      hdie "apt-get install ${packages[*]} failed"
  fi
  clang_cxx=${RAYLESS_CLANG_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
  clang_c=${RAYLESS_CLANG_C:-$(command -v clang-14 || command -v clang || true)}
  [ -n "$clang_cxx" ] && [ -n "$clang_c" ] ||
    hdie "missing: clang and clang++ (Debian: clang-14 libclang-rt-14-dev llvm-14; a cluster: module load llvm)"
  symbolizer=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
  [ -n "$symbolizer" ] || hsay "warning: no llvm-symbolizer: reports will show addresses, not lines"
}

# configures and builds build-sanitize/ through tools/setup.sh (same LibTorch, same dependencies)
build_sanitized() {
  local targets=("$@")
  RAYLESS_BUILD_DIR=$sanitize_build_dir RAYLESS_SKIP_BUILD=1 \
    RAYLESS_CMAKE_ARGS="-DCMAKE_C_COMPILER=$clang_c -DCMAKE_CXX_COMPILER=$clang_cxx -DRAYLESS_SANITIZE=ON -DRAYLESS_FUZZ=ON ${RAYLESS_CMAKE_ARGS:-}" \
    "$hardening_root/tools/setup.sh"
  hsay "building $sanitize_build_dir (clang, ASan + UBSan + libFuzzer coverage)${targets[*]:+: ${targets[*]}}"
  cmake --build "$hardening_root/$sanitize_build_dir" -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"} ||
    hdie "sanitizer build failed"
}

# the sanitizers' run-time settings: every report is fatal; suppressions are ours, with reasons
sanitizer_env() {
  local supp=$hardening_root/tools/sanitizers
  # allocator_may_return_null: a refused allocation reaches LibTorch as an error, as without ASan (exit 5 is tested)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:check_initialization_order=1:allocator_may_return_null=1:suppressions=$supp/asan.supp}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
  # Open MPI unloads its components at MPI_Finalize; kept loaded, their frames can be named
  export OMPI_MCA_mca_base_component_disable_dlclose=1
  if [ -n "${symbolizer:-}" ]; then export ASAN_SYMBOLIZER_PATH=$symbolizer; fi
}

# For processes that start MPI: stacks of every allocation taken the slow way, through Open MPI's
# frames (it is built without frame pointers), so lsan.supp can match them. Costs about 4x.
slow_unwind_env() {
  case "$LSAN_OPTIONS" in *fast_unwind_on_malloc*) ;; *) export LSAN_OPTIONS="$LSAN_OPTIONS:fast_unwind_on_malloc=0" ;; esac
}
