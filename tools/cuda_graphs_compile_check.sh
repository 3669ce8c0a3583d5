#!/usr/bin/env bash
# Compile-only check of the generation engine's CUDA graphs (src/sampler/decode_graphs.cpp with
# RAYLESS_CUDA_GRAPHS) against LibTorch's ATen/cuda headers and the CUDA toolkit's runtime headers, on
# a machine without a GPU or a CUDA LibTorch: the graph path cannot rot unseen. Nothing is linked or run.
set -euo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root_dir"
. tools/cuda_home.sh
cuda_home=$(find_cuda_home) || { echo "cuda-graphs-check: error: CUDA runtime headers not found (set CUDA_HOME)" >&2; exit 2; }
torch_dir=$(.venv/bin/python -c 'import torch, os; print(os.path.dirname(torch.__file__))')
# a CPU LibTorch ships c10/cuda's headers but not the one its CUDA build generates: its one line here
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
mkdir -p "$shim/c10/cuda/impl"
echo '#define C10_CUDA_BUILD_SHARED_LIBS' > "$shim/c10/cuda/impl/cuda_cmake_macros.h"
${CXX:-c++} -std=c++17 -fsyntax-only -DRAYLESS_CUDA_GRAPHS=1 -Iinclude -Isrc -isystem "$torch_dir/include" -isystem "$shim" \
  -isystem "$torch_dir/include/torch/csrc/api/include" -isystem "$cuda_home/include" src/sampler/decode_graphs.cpp
echo "cuda-graphs-check: src/sampler/decode_graphs.cpp compiles with CUDA graphs against $cuda_home/include"
