// A decode step's rotary embedding in three kernels for q and k together (joint_rotary; cuda_backend.h).
//
// The reference, transformers' x * cos + rotate_half(x) * sin with rotate_half(x) = cat(-x2, x1), runs
// five kernels per tensor (neg, cat, two products, a sum): ten per layer of a decode step, a third of
// the kernels a step launches on a GPU. Written half by half, out = x * cos, then out1 -= x2 * sin1 and
// out2 += x1 * sin2, it is one product and two addcmul on the halves of out: no rotated copy of x, no
// negation. And q and k rotate as one tensor where they are neighbours in memory: generation's fused
// q/k/v projection leaves them side by side, heads after heads, so [rows, H + H_kv, D] views both.
// The products are the reference's; addcmul adds the second to the first in float32 (one rounding
// for bfloat16, where the reference rounds the product first; on a GPU a fused multiply-add).
#include <torch/torch.h>

#include "ops/cuda/cuda_backend.h"
#include "rayless/ops/kernel_plan.h"

namespace rayless::ops::cuda {

namespace {
// x [rows, heads, D] rotated by tables [rows, 1, D]
torch::Tensor rotated(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto out = x * cos;
  out.narrow(-1, 0, half).addcmul_(x.narrow(-1, half, half), sin.narrow(-1, 0, half), -1);
  out.narrow(-1, half, half).addcmul_(x.narrow(-1, 0, half), sin.narrow(-1, half, half), 1);
  return out;
}

// whether k's heads follow q's in memory, so that one view [rows, H + H_kv, D] holds both
bool neighbours(const torch::Tensor& q, const torch::Tensor& k) {
  return q.strides() == k.strides() && q.stride(2) == 1 && q.stride(1) == q.size(2) &&
         q.stride(0) >= (q.size(1) + k.size(1)) * q.size(2) && q.storage().is_alias_of(k.storage()) &&
         k.data_ptr() == static_cast<const char*>(q.data_ptr()) + q.size(1) * q.stride(1) * q.element_size();
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> joint_rotary(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!kernel_plan().on(Kernel::joint_rotary)) return {};
  const int64_t D = q.dim() == 3 ? q.size(2) : 0;
  if (D == 0 || D % 2 != 0 || k.dim() != 3 || k.size(0) != q.size(0) || k.size(2) != D ||
      q.scalar_type() != k.scalar_type() || cos.dim() != 3 || cos.sizes() != sin.sizes() ||
      cos.size(0) != q.size(0) || cos.size(1) != 1 || cos.size(2) != D)
    return {};
  // a decode step has no gradients; training's rotary keeps the reference and its autograd
  if (torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || cos.requires_grad() || sin.requires_grad()))
    return {};
  const int64_t rows = q.size(0), H = q.size(1), H_kv = k.size(1);
  // the attention's padded layout [rows, heads, 1, D]
  const auto padded = [rows](const torch::Tensor& x) { return x.view({rows, 1, x.size(1), x.size(2)}).transpose(1, 2); };
  if (neighbours(q, k)) {
    const auto both = rotated(q.as_strided({rows, H + H_kv, D}, q.strides()), cos, sin);
    return {padded(both.narrow(1, 0, H)), padded(both.narrow(1, H, H_kv))};
  }
  return {padded(rotated(q, cos, sin)), padded(rotated(k, cos, sin))};
}

}  // namespace rayless::ops::cuda
