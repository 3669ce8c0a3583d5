// Grouped-query attention as one attention per key head (folded_gqa_attention; cuda_backend.h).
//
// LibTorch's scaled_dot_product_attention takes grouped-query attention (enable_gqa) in its flash
// kernel, which takes no mask; in its cuDNN kernel, half precision only and chosen first only on sm90
// and sm100 GPUs with cuDNN 9.9 or later; and in its math kernel, which repeats every key and value for
// each query head of its group and writes the scores out. Its memory-efficient kernel takes masks but
// not grouped heads. A decode step always has a mask (left padding, slots of different lengths), so it
// ran the math kernel in float32 anywhere, and in bfloat16 wherever cuDNN does not come first: for a
// 0.5B Qwen2.5 shape (14 query heads, 2 key heads) seven copies of the whole KV cache per layer and
// step. Folded, the G query heads that share key head j are G x T query positions of one head j: the
// same scores, each key read once, and the call has equal head counts, which the memory-efficient
// kernel takes (or cuDNN, where it comes first). With gradients (the training pass) the same holds for
// the backward: the math kernel saved the attention weights of every query head per layer; the fused
// kernels save the outputs, their log-sum-exp and one mask per key head.
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/torch.h>

#include <optional>

#include "ops/cuda/cuda_backend.h"
#include "rayless/ops/kernel_plan.h"

namespace rayless::ops::cuda {

torch::Tensor folded_gqa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& allowed, double scale) {
  if (!kernel_plan().on(Kernel::folded_gqa_attention)) return {};
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return {};
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), H_kv = k.size(1), S = k.size(2);
  if (H == H_kv || H_kv == 0 || H % H_kv != 0 || v.size(1) != H_kv) return {};
  if (allowed.defined() && (allowed.dim() != 4 || allowed.size(1) != 1)) return {};
  const int64_t G = H / H_kv;
  // query head h reads key head h / G (enable_gqa's order): heads j*G .. j*G+G-1 become the G x T
  // query positions of head j, row-major in (group member, position)
  const auto folded_q = q.reshape({B, H_kv, G * T, D});
  std::optional<torch::Tensor> mask;
  if (allowed.defined() && allowed.size(2) == 1) {
    mask = allowed;  // the same keys for every query (a decode step's): it broadcasts over the folded positions
  } else if (allowed.defined()) {
    const int64_t rows = allowed.size(0);
    // the same keys for every member of a group: the mask repeated along the folded positions
    mask = allowed.expand({rows, 1, T, S}).unsqueeze(2).expand({rows, 1, G, T, S}).reshape({rows, 1, G * T, S});
  }
  const auto out = at::scaled_dot_product_attention(folded_q, k, v, mask, 0.0, false, scale, false);
  return out.reshape({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});
}

}  // namespace rayless::ops::cuda
