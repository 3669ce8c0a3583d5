// RMSNorm on the CPU: a decode step's float32 norm in one pass per row (avx2_decode_rms_norm), and
// training's one-pass backward (rms_norm_one_pass_backward, its rows on AVX-512 where they fit:
// avx512_rms_norm_backward); see ops.h, rms_norm.
#include "ops/cpu/cpu_backend.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <vector>

#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "ops/cpu/x86/avx512/avx512_kernels.h"
#include "ops/reference.h"

namespace rayless::ops {

namespace {

// One row's backward; gw_sum accumulates the weight's gradient over rows. With c = r^3 <g*w, x> / D:
// dx = r g w - c x and dw += g (x r), the derivative of w * x * rsqrt(mean(x^2) + eps).
void backward_rows_scalar(const float* g, const float* x, const float* w, const float* r, int64_t rows, int64_t D,
                          float* dx, float* gw_sum) {
  for (int64_t n = 0; n < rows; ++n, g += D, x += D, dx += D) {
    const float rn = r[n];
    float dot = 0.0f;
    for (int64_t i = 0; i < D; ++i) {
      dot += g[i] * w[i] * x[i];
      gw_sum[i] += g[i] * (x[i] * rn);
    }
    const float c = rn * rn * rn * dot / static_cast<float>(D);
    for (int64_t i = 0; i < D; ++i) dx[i] = rn * (g[i] * w[i]) - c * x[i];
  }
}

struct RmsNormOnePassBackward : public torch::autograd::Function<RmsNormOnePassBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               double eps) {
    torch::Tensor r;
    const auto out = weight * reference::rms_normalised(x, eps, &r);  // x is float32: the casts to and from it are no-ops
    ctx->save_for_backward({x, weight, r});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const int64_t D = saved[0].size(-1);
    const auto x = saved[0].contiguous().view({-1, D});
    const auto weight = saved[1].contiguous(), r = saved[2].contiguous();
    const auto g = grad_outputs[0].to(at::kFloat).contiguous().view({-1, D});
    auto dx = torch::empty_like(x);
    std::vector<float> gw_sum(static_cast<size_t>(D), 0.0f);
    auto* rows_backward = &backward_rows_scalar;
#ifdef RAYLESS_X86_KERNELS
    if (kernel_plan().on(Kernel::avx512_rms_norm_backward) && D % 16 == 0) rows_backward = &avx512::rms_norm_backward_rows;
#endif
    rows_backward(
        g.data_ptr<float>(), x.data_ptr<float>(), weight.data_ptr<float>(), r.data_ptr<float>(), x.size(0), D,
        dx.data_ptr<float>(), gw_sum.data());
    auto dw = torch::from_blob(gw_sum.data(), {D}, torch::kFloat).clone();
    return {dx.view(saved[0].sizes()), dw, torch::Tensor()};
  }
};

}  // namespace

bool rms_norm_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& weight) {
  return kernel_plan().on(Kernel::rms_norm_one_pass_backward) && x.device().is_cpu() &&
         x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && weight.dim() == 1 &&
         x.size(-1) == weight.size(0) && torch::GradMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad()) && at::autocast::is_autocast_enabled(at::kCPU);
}

namespace cpu {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!rms_norm_backward_in_one_pass(x, weight)) return {};
  return RmsNormOnePassBackward::apply(x, weight, eps);
}

torch::Tensor decode_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!kernel_plan().on(Kernel::avx2_decode_rms_norm)) return {};
  return avx2::decode_rms_norm(x, weight, eps);
}

}  // namespace cpu

}  // namespace rayless::ops
