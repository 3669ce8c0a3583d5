// AdamW's update: the one dispatch point, and its reference (LibTorch's tensor ops); see ops.h. Built with
// the single pass's flags (-ffp-contract=off -fno-math-errno -O3, CMakeLists.txt), as it was in one file
// with it.
#include "backend.h"

#include <cmath>

namespace rayless::ops {

namespace {

// the gradient times the clip coefficient, as clip_by_norm's mul_ computes it (by a 0-dimensional
// tensor of the gradient's dtype)
torch::Tensor hyper_scaled(const torch::Tensor& grad, const AdamWHyper& h) {
  if (h.grad_scale == 1) return grad;
  return grad * torch::full({}, h.grad_scale, grad.options());
}

}  // namespace

void adamw_update_tensor_ops(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                             torch::Tensor& exp_avg_sq, const AdamWHyper& h) {
  torch::NoGradGuard no_grad;
  const torch::Tensor scaled = hyper_scaled(grad, h);
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(h.beta2, double(h.step)));
  const double step_size = h.lr / (1 - std::pow(h.beta1, double(h.step)));
  param.mul_(1 - h.lr * h.weight_decay);
  exp_avg.lerp_(scaled, 1 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(scaled, scaled, 1 - h.beta2);
  const torch::Tensor denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(h.eps);
  param.addcdiv_(exp_avg, denom, -step_size);
}

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWHyper& hyper) {
  const BackendTable& backend = backend_for(param.device());
  if (backend.adamw_update && backend.adamw_update(param, grad, exp_avg, exp_avg_sq, hyper)) return;
  adamw_update_tensor_ops(param, grad, exp_avg, exp_avg_sq, hyper);
}

}  // namespace rayless::ops
