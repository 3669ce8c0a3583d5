// The rotary embedding applied in the model's passes: x * cos + rotate_half(x) * sin, with a one-pass
// forward and backward in bfloat16 training.
#pragma once
#include <torch/types.h>

namespace rayless {

// x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]): transformers'
// apply_rotary_pos_emb, with these ATen calls and bits. For a packed pass's bfloat16 x [N, H, D] with
// gradients and float32 tables [N, 1, D] on the CPU (train.bf16), the backward is one node computing
// dx = g * cos + rotate_half^T(g * sin) in float32 and rounding it once, where autograd's runs nine
// kernels, zero-fills a full-size gradient for each half and rounds each term to bfloat16 before
// adding them in bfloat16. Under bfloat16 autocast its forward is one pass too, and returns the
// float32 result rounded to bfloat16 (what autocast's attention casts it to, bit for bit), where ATen
// made six passes and a float32 tensor. Elsewhere autograd's backward.
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Whether apply_rotary takes its one-pass backward for these operands now.
bool rotary_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace rayless
