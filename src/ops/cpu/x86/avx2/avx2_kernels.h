// The AVX2 kernels (with FMA where they say so). Each function carries its own target attribute, so
// the rest of the build needs no AVX2 flags; the CPU backend (cpu_backend.h) calls them only where the
// plan (kernel_plan.h) found the instructions and the kernel on, and only with RAYLESS_X86_KERNELS.
// Private to src/ops.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "rayless/ops/ops.h"

namespace rayless::ops::avx2 {

// ---- avx2_linear --------------------------------------------------------------------------------
// float32 products for generation's decode steps on CPUs with AVX2 and FMA but no AVX-512 (AMD before
// Zen 4, older Intel). There oneDNN's packed float32 kernel ran a decode product of 1-16 rows at 25-48
// GFLOP/s, and each call cost it tens of microseconds before any arithmetic, which is most of a small
// model's product; this kernel keeps 6 rows x 16 outputs of sums in registers and streams a weight laid
// out in the order it reads it. On CPUs with AVX-512, oneDNN's kernel was as fast as a hand-written one,
// so the plan keeps oneDNN's there (docs/kernels.md).
// Each output is one float32 sum over the inputs in order, plus the bias: the same bits whatever the
// thread count, within float32 summation-order rounding of oneDNN's and MKL's results.

// Parts [out_i, in] float32 on the CPU (stacked in order, out = sum out_i) -> the kernel's layout
// (1-D float32): for each block of 16 outputs, for each input, the block's 16 weights; the last block
// is filled with zeros past `out`. The parts are read in place: a fused weight needs no concatenated
// copy first.
torch::Tensor pack(const std::vector<torch::Tensor>& parts);

// x [rows, in] float32 (contiguous), packed from pack() of parts of out rows in all, bias [out] float32
// or undefined -> [rows, out] float32: x w^T + bias.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out, const torch::Tensor& bias);

// ---- avx2_decode_attention ----------------------------------------------------------------------
// A decode step holds one query per row. LibTorch's scaled_dot_product_attention runs its CPU flash
// kernel there, built for blocks of queries: per call it builds an additive mask from the boolean one,
// allocates and fills its buffers and runs small matrix products. At 16 rows of the tiny benchmark
// model (4/2 heads, 64 keys) that took 140-180 microseconds per layer against this kernel's 74-76,
// which is then mostly reading the layer's 1 MB of keys and values from the L3 cache. Here each (row,
// head) takes one pass over its keys (dot products with FMA), the exponentials of its scores (exp8.h,
// within 2 ulp; they replaced one LibTorch exp_ over all rows' scores, about a tenth of the call), and
// one pass over its values. The result is the attention's softmax(q k^T * scale) v over the allowed
// keys, within float32 rounding of LibTorch's (sums in another order); it does not depend on the thread
// count.
//
// q [B, H, 1, D], k and v [B, H_kv, S, D] (H a multiple of H_kv: grouped-query attention, each kv head
// serving H / H_kv query heads), each with unit stride along D, allowed bool [B or 1, 1, 1, S] (true =
// may attend) -> [B, 1, H * D] float32 (the heads side by side). Undefined where the kernel does not
// apply: operands not float32 on the CPU or of other shapes, autocast lowering float32, gradients
// wanted, or a row with no allowed key.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale);

// ---- avx2_decode_rms_norm -----------------------------------------------------------------------
// rms_norm's reference is transformers' formula in LibTorch operators: to, pow, mean (a sum and a
// division), add, rsqrt and two products, each its own call with its own output. A decode step of the
// tiny benchmark model runs 13 of them on [16, 1, 256] (two per layer and the last), and the calls'
// fixed costs, not their arithmetic, made them about a tenth of the step. Here each row's sum of
// squares is one FMA chain, and weight * (x * r) with r = 1 / sqrt(sum / D + eps) is written in the
// same pass, rounded as LibTorch's two products round it: the result differs from the reference only
// by the order of that sum.
//
// x [B, 1, D] float32 (one position per row: a decode step), contiguous, weight [D] float32 -> [B, 1, D]
// float32. Undefined where the kernel does not apply: operands of other dtypes, devices or shapes, more
// than one position per row, autocast lowering float32, or gradients wanted.
torch::Tensor decode_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// ---- avx2_decode_silu_times ---------------------------------------------------------------------
// While generating, the MLP's gate and up projections are one fused product (FusedGenerationWeights),
// and silu(gate) * up took two narrows, LibTorch's silu and a product: at a tiny-model decode step about
// 20 microseconds per layer, most of it LibTorch's exponential at 1.5 ns or more per float. Here each
// element is gate / (1 + e^-gate) * up, silu's own formula and rounding, with e^x from exp8.h (within 2
// ulp, where LibTorch's exp is within 1): results within a few float32 ulps of LibTorch's.
//
// gate_up [..., 2 I] float32, contiguous, gate the first I of the last dimension and up the rest ->
// [..., I] float32: silu(gate) * up. Undefined where the kernel does not apply: another dtype or device,
// an odd last dimension, autocast lowering float32, or gradients wanted.
torch::Tensor decode_silu_times(const torch::Tensor& gate_up);

// ---- avx2_adamw, avx2_sum_of_squares ------------------------------------------------------------
// The float32 loops of adamw_single_pass and sum_of_squares_single_pass, 8 elements at a time, for
// CPUs without AVX-512: the same operations in the same order as the portable loop, each rounded (no
// fused multiply-add), so every element (every partial sum) comes out bit for bit as there. Each
// returns where the portable loop goes on.
int64_t adamw_update_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin,
                           int64_t end, const AdamWHyper& hyper);
int64_t sum_of_squares_float(const float* x, int64_t n, double partial[8]);

}  // namespace rayless::ops::avx2
