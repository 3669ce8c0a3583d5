// oneDNN's kernel cache: bounded at start, reported by `rayless version`.
#pragma once
#include <string>

namespace rayless::cli {

// oneDNN (LibTorch's bfloat16 matmuls on CPUs) caches a compiled kernel per matmul shape, up to 1024
// of them, and packed lengths give new shapes every step: under train.bf16 peak RSS grew ~20 MB per
// step (53M model; +440 MB by step 24). 256 kernels hold every shape a step uses again (measured:
// step time within noise; 128 cost 3 % of training at 256 tokens), docs/notes/bench-levers.md "oneDNN's
// kernel cache". A user's own setting wins. Call before LibTorch first calls oneDNN (it reads it once).
void bound_onednn_kernel_cache();
// The capacity in force: the user's or ours, as set in the environment; empty when none is set.
std::string onednn_kernel_cache_capacity();

}  // namespace rayless::cli
