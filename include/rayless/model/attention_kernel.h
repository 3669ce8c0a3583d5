// Scaled dot-product attention for the model's passes: at::scaled_dot_product_attention, except that
// a pass with gradients in bfloat16 or half on the CPU runs its backward in float32.
#pragma once
#include <torch/types.h>

namespace rayless {

// at::scaled_dot_product_attention(q, k, v, allowed, 0, false, scale, enable_gqa) with a boolean mask
// (true = may attend), operands cast as autocast casts them. The forward is that call's, bit for bit.
// Where it runs LibTorch's CPU flash kernel on bfloat16 or half operands with gradients, the backward
// runs the same kernel on the operands widened to float32 and rounds the gradients once: LibTorch's
// reduced-precision CPU backward took 3.5x as long as its float32 one (docs/benchmarks.md, "Attention's
// backward in float32") and rounds its intermediates, so these gradients are nearer the exact ones.
torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa);

// Whether scaled_attention takes its float32-backward path for these operands now (the tests use it).
bool attention_backward_in_float32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

}  // namespace rayless
