// RMSNorm as transformers computes it, with a one-pass backward in bfloat16 training.
#pragma once
#include <torch/types.h>

namespace rayless {

// weight * (x * rsqrt(mean(x^2, -1) + eps)), x widened to float32 for the statistics and the normalised
// value cast back to x's dtype (transformers' Qwen2RMSNorm / LlamaRMSNorm); the forward's ATen calls
// are those, so its bits are too.
// Under autocast on the CPU (train.bf16), with gradients, a float32 x and weight: the backward is one
// node that reads the output's gradient, x and the weight once per row (two passes), where autograd's
// backward of the forward's calls runs eight kernels and keeps x^2, the mean and the normalised value.
// Its gradients are autograd's formulas with the sums in another order, so their last bits differ;
// float32 runs (and the float32 parity tests against TRL) keep autograd's backward.
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// Whether rms_norm takes its one-pass backward for these operands now.
bool rms_norm_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace rayless
