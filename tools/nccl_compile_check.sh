#!/usr/bin/env bash
# Compile-only check of the NCCL backend (src/comm/nccl) against nccl.h and the CUDA runtime headers,
# using whatever LibTorch build/ was configured with. Finds nccl.h in RAYLESS_NCCL_INCLUDE_DIR, next to
# the CUDA toolkit's headers, or in the nvidia-nccl wheel (headers only are extracted into .venv).
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root_dir"
if [ ! -d src/comm/nccl ]; then echo "nccl-check: no src/comm/nccl yet"; exit 0; fi
# the CUDA toolkit: CUDA_HOME, /usr/local/cuda, or two levels above nvcc — whichever has the headers
. tools/cuda_home.sh
cuda_home=$(find_cuda_home) || { echo "nccl-check: error: CUDA runtime headers not found (set CUDA_HOME)" >&2; exit 2; }
include_dir=${RAYLESS_NCCL_INCLUDE_DIR:-}
if [ -z "$include_dir" ]; then
  for d in "$cuda_home/include" /usr/include .venv/nccl-include; do
    [ -f "$d/nccl.h" ] && include_dir=$d && break
  done
fi
if [ -z "$include_dir" ]; then
  echo "nccl-check: nccl.h not found beside CUDA; extracting it from the nvidia-nccl-cu13 wheel"
  tmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --no-deps -d "$tmp" nvidia-nccl-cu13 \
    || { echo "nccl-check: error: cannot get nccl.h (set RAYLESS_NCCL_INCLUDE_DIR)" >&2; exit 2; }
  mkdir -p .venv/nccl-include
  (cd "$tmp" && "$root_dir/.venv/bin/python" - "$root_dir/.venv/nccl-include" <<'PY'
import sys, zipfile, glob, os
whl = glob.glob("*.whl")[0]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if "/include/" in name and not name.endswith("/"):
            target = os.path.join(sys.argv[1], name.split("/include/", 1)[1])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(z.read(name))
PY
  ) || exit 2
  rm -rf "$tmp"
  include_dir=.venv/nccl-include
fi
include_dir=$(cd "$include_dir" && pwd)
prefix=$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
check_dir=${RAYLESS_BUILD_DIR:-build}-nccl-check
# configure every time (cheap when nothing changed) so changed include directories take effect
{
  cmake -S . -B "$check_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_PREFIX_PATH="$prefix" \
    $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) \
    -DRAYLESS_CUDA=OFF -DRAYLESS_NCCL_COMPILE_CHECK=ON -DRAYLESS_NCCL_INCLUDE_DIR="$include_dir" \
    -DRAYLESS_CUDA_INCLUDE_DIR="$cuda_home/include" >/dev/null
}
cmake --build "$check_dir" --target rayless_nccl -j "$(nproc)"
echo "nccl-check: src/comm/nccl compiles against $include_dir/nccl.h"
