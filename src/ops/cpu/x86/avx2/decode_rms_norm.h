// A decode step's float32 RMSNorms on the CPU in one pass per row, for CPUs with AVX2 and FMA.
//
// rms_norm() is transformers' formula in LibTorch operators: to, pow, mean (a sum and a division),
// add, rsqrt and two products, each its own call with its own output. A decode step of the tiny
// benchmark model runs 13 of them on [16, 1, 256] (two per layer and the last), and the calls' fixed
// costs, not their arithmetic, made them about a tenth of the step (docs/benchmarks.md, "The decode
// step's RMSNorm, silu and softmax in one pass"). Here each row's sum of squares is one FMA chain,
// and weight * (x * r) with r = 1 / sqrt(sum / D + eps) is written in the same pass, rounded as
// LibTorch's two products round it: the result differs from rms_norm's only by the order of that sum.
#pragma once
#include <torch/types.h>

#include <string>

namespace rayless {

// The CPU has AVX2 and FMA and the kernel is not switched off (set_decode_rms_norm_enabled, or
// RAYLESS_AVX2=0 in the environment, which turns off every AVX2 kernel of rayless).
bool decode_rms_norm_available();
// For tests and measurements: use or ignore the kernel from now on (where available otherwise).
void set_decode_rms_norm_enabled(bool enabled);
// Which code a decode step's RMSNorms run on, and why (`rayless version` prints it).
std::string describe_decode_rms_norm();

// weight * (x * rsqrt(mean(x^2, -1) + eps)) for x [B, 1, D] float32 (one position per row: a decode
// step), contiguous, weight [D] float32 -> [B, 1, D] float32. Returns an undefined tensor where the
// kernel does not apply, and the caller runs rms_norm(): a kernel not available, operands of other
// dtypes, devices or shapes, more than one position per row, autocast lowering float32, or
// gradients wanted.
torch::Tensor decode_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace rayless
