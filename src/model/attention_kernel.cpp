#include "rayless/model/attention_kernel.h"

#include <ATen/Context.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/autograd.h>

#include <limits>

#include "rayless/model/autocast_scope.h"

namespace rayless {

namespace {

bool reduced(at::ScalarType dtype) { return dtype == at::kBFloat16 || dtype == at::kHalf; }

// The boolean mask as the additive one the flash kernel takes (0 where allowed, -inf elsewhere), in the
// query's dtype: what at::scaled_dot_product_attention builds from a boolean mask before calling it.
torch::Tensor additive(const torch::Tensor& allowed, at::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// The CPU flash kernel's forward as at::scaled_dot_product_attention calls it; the backward on float32
// copies of what it saved, the gradients rounded to the operands' dtype once.
struct FlashAttentionFloat32Backward : public torch::autograd::Function<FlashAttentionFloat32Backward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask, double scale) {
    auto [out, logsumexp] = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false, mask, scale);
    ctx->save_for_backward({q, k, v, out, logsumexp, mask});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto wide = [](const torch::Tensor& t) { return t.to(at::kFloat); };
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        wide(grad_outputs[0]), wide(saved[0]), wide(saved[1]), wide(saved[2]), wide(saved[3]), saved[4], 0.0, false,
        wide(saved[5]), ctx->saved_data["scale"].toDouble());
    return {dq.to(saved[0].scalar_type()), dk.to(saved[1].scalar_type()), dv.to(saved[2].scalar_type()),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool attention_backward_in_float32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto dtype = autocast_compute_dtype(q.device().type(), q.scalar_type());
  return q.device().is_cpu() && reduced(dtype) && torch::GradMode::is_enabled() &&
         (q.requires_grad() || k.requires_grad() || v.requires_grad()) && at::globalContext().userEnabledFlashSDP() &&
         q.dim() == 4 && k.dim() == 4 && v.dim() == 4;
}

torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa) {
  if (!attention_backward_in_float32(q, k, v))
    return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, false, scale, enable_gqa);
  // autocast's casts of the operands, as it would make them for at::scaled_dot_product_attention
  const auto dtype = autocast_compute_dtype(q.device().type(), q.scalar_type());
  const auto mask = additive(allowed, dtype);
  return FlashAttentionFloat32Backward::apply(q.to(dtype), k.to(dtype), v.to(dtype), mask, scale);
}

}  // namespace rayless
