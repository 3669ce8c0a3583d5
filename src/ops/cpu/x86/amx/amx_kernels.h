// The AMX kernel (amx_linear): bfloat16 products on Intel AMX tiles, for generation's decode steps.
// With few rows a product is a stream of its weight; the generation copy of a 53M model (107 MB in
// bfloat16) stays in the benchmark machine's last-level cache. This kernel stores the weight in the
// order its tile loads walk it and prefetches ahead; with it a decode step of that model took 9-30 %
// less time than on oneDNN's packed kernel (docs/kernels.md).
// Sums in float32 over 32 inputs at a time, as oneDNN's AMX kernel does; output rounded to bfloat16.
// Private to src/ops; the plan (kernel_plan.h) decides where it runs.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace rayless::ops::amx {

// Asks Linux for the 8 KiB tile state (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), once per
// process: without it the first tile instruction would kill the process. True when granted; the CPU
// must have the tiles (cpu_has_amx_bf16).
bool request_tile_permission();

// Whether a [out, in] weight fits the tile layout: out a multiple of 64, in a multiple of 32.
bool fits(int64_t out, int64_t in);

// Parts [out_i, in] (float32 or bfloat16, stacked in order, out = sum out_i) -> their bfloat16 values
// in the tile layout (1-D, out * in elements): for each block of 64 outputs, for each 32 inputs, four
// [16 input pairs][16 outputs][2] tiles. float32 is rounded to nearest even, as a cast is; the parts
// are read in place, so a fused weight needs no concatenated copy first.
torch::Tensor pack(const std::vector<torch::Tensor>& parts);

// x [rows, in] bfloat16 (contiguous), packed from pack() of parts of out rows in all, bias [out] bfloat16 or
// undefined -> [rows, out] bfloat16: round(x w^T + bias), the sum and the bias added in float32. Only
// after request_tile_permission() granted the tiles.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out, const torch::Tensor& bias);

}  // namespace rayless::ops::amx
