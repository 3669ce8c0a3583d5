// Scaled dot-product attention for the model's passes: at::scaled_dot_product_attention, except that
// a pass with gradients in bfloat16 or half on the CPU runs its backward in float32.
#pragma once
#include <torch/types.h>

#include <vector>

namespace rayless {

// at::scaled_dot_product_attention(q, k, v, allowed, 0, false, scale, enable_gqa) with a boolean mask
// (true = may attend), operands cast as autocast casts them. The forward is that call's, bit for bit.
// Where it runs LibTorch's CPU flash kernel on bfloat16 or half operands with gradients, the backward
// runs the same kernel on the operands widened to float32 and rounds the gradients once: LibTorch's
// reduced-precision CPU backward took 3.5x as long as its float32 one (docs/benchmarks.md, "Attention's
// backward in float32") and rounds its intermediates, so these gradients are nearer the exact ones.
torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa);

// Whether scaled_attention takes its float32-backward path for these operands now.
bool attention_backward_in_float32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// One bucket of a packed pass's attention (length_buckets.h): `count` rows of `length` queries, next in
// the flat query layout, attending to the first `keys` keys of the rows `rows` of k and v (undefined:
// all rows, in order), `allowed` the boolean mask [count or 1, 1, length, keys].
struct AttentionBucket {
  int64_t count = 0, length = 0, keys = 0;
  torch::Tensor rows, allowed;
};

// scaled_attention on each bucket in turn: queries [sum of count * length, H, D], k and v [B, H_kv, S, D]
// (each row in one bucket at most); returns [sum of count * length, H * D], the buckets' outputs one
// after the other. Where attention_backward_in_float32(queries, k, v) holds, the buckets are one
// autograd node, with scaled_attention's values and gradients bucket by bucket, bit for bit: its
// backward writes each bucket's key and value gradients into one float32 buffer, where autograd would
// build a full-size zero gradient for every bucket's narrowing and gathering of k and v and add them
// all up. Elsewhere scaled_attention bucket by bucket through autograd.
torch::Tensor scaled_attention_buckets(const torch::Tensor& queries, const torch::Tensor& k, const torch::Tensor& v,
                                       const std::vector<AttentionBucket>& buckets, double scale, bool enable_gqa);

}  // namespace rayless
