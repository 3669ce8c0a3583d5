#include "rayless/trainer/adamw_update.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "rayless/base/error.h"

namespace rayless {

namespace {

template <typename scalar_t>
void update_range(scalar_t* __restrict param, const scalar_t* __restrict grad, scalar_t* __restrict exp_avg,
                  scalar_t* __restrict exp_avg_sq, int64_t begin, int64_t end, const AdamWHyper& h) {
  using opmath_t = at::opmath_type<scalar_t>;
  // the scalars as torch's kernels see them: converted once to the compute type
  const auto decay = static_cast<opmath_t>(1 - h.lr * h.weight_decay);
  const auto one_minus_beta1 = static_cast<opmath_t>(1 - h.beta1);
  const auto beta2 = static_cast<opmath_t>(h.beta2), one_minus_beta2 = static_cast<opmath_t>(1 - h.beta2);
  const auto bias_correction2_sqrt = static_cast<opmath_t>(std::sqrt(1 - std::pow(h.beta2, double(h.step))));
  const auto step_size = static_cast<opmath_t>(-(h.lr / (1 - std::pow(h.beta1, double(h.step)))));
  const auto eps = static_cast<opmath_t>(h.eps);
  for (int64_t i = begin; i < end; ++i) {
    opmath_t p = static_cast<opmath_t>(param[i]) * decay;
    const opmath_t g = grad[i];
    opmath_t m = exp_avg[i];
    m = m + one_minus_beta1 * (g - m);
    opmath_t v = exp_avg_sq[i];
    v = v * beta2 + one_minus_beta2 * g * g;
    const opmath_t denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    p = p + step_size * (m / denom);
    param[i] = static_cast<scalar_t>(p);
    exp_avg[i] = static_cast<scalar_t>(m);
    exp_avg_sq[i] = static_cast<scalar_t>(v);
  }
}

}  // namespace

void adamw_update_tensor_ops(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                             torch::Tensor& exp_avg_sq, const AdamWHyper& h) {
  torch::NoGradGuard no_grad;
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(h.beta2, double(h.step)));
  const double step_size = h.lr / (1 - std::pow(h.beta1, double(h.step)));
  param.mul_(1 - h.lr * h.weight_decay);
  exp_avg.lerp_(grad, 1 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(grad, grad, 1 - h.beta2);
  const torch::Tensor denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(h.eps);
  param.addcdiv_(exp_avg, denom, -step_size);
}

void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWHyper& hyper) {
  if (!param.device().is_cpu()) return adamw_update_tensor_ops(param, grad, exp_avg, exp_avg_sq, hyper);
  auto check = [&](const torch::Tensor& t) {
    runtimeCheck(t.scalar_type() == param.scalar_type() && t.numel() == param.numel() && t.is_contiguous() &&
                     t.device() == param.device(),
                 "adamw_update: tensors of one dtype, size and device, contiguous");
  };
  check(param);
  check(grad);
  check(exp_avg);
  check(exp_avg_sq);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, param.scalar_type(), "adamw_update", [&] {
    scalar_t* p = param.data_ptr<scalar_t>();
    const scalar_t* g = grad.data_ptr<scalar_t>();
    scalar_t* m = exp_avg.data_ptr<scalar_t>();
    scalar_t* v = exp_avg_sq.data_ptr<scalar_t>();
    at::parallel_for(0, param.numel(), 1 << 14,
                     [&](int64_t begin, int64_t end) { update_range(p, g, m, v, begin, end, hyper); });
  });
}

}  // namespace rayless
