#include "rayless/ops/rms_norm.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

#include <vector>

namespace rayless {

namespace {

torch::Tensor normalised(const torch::Tensor& h, double eps, torch::Tensor* inverse_rms) {
  const auto r = torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (inverse_rms) *inverse_rms = r;
  return h * r;
}

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

#ifdef RAYLESS_X86_KERNELS
__attribute__((target("avx512f"))) void backward_rows_avx512(const float* g, const float* x, const float* w,
                                                              const float* r, int64_t rows, int64_t D, float* dx,
                                                              float* gw_sum) {
  for (int64_t n = 0; n < rows; ++n, g += D, x += D, dx += D) {
    const __m512 rn = _mm512_set1_ps(r[n]);
    __m512 dot = _mm512_setzero_ps();
    for (int64_t i = 0; i < D; i += 16) {
      const __m512 gi = _mm512_loadu_ps(g + i), xi = _mm512_loadu_ps(x + i);
      dot = _mm512_fmadd_ps(_mm512_mul_ps(gi, _mm512_loadu_ps(w + i)), xi, dot);
      _mm512_storeu_ps(gw_sum + i, _mm512_fmadd_ps(gi, _mm512_mul_ps(xi, rn), _mm512_loadu_ps(gw_sum + i)));
    }
    alignas(64) float lanes[16];  // the lanes summed in order (GCC 12 warns on _mm512_reduce_add_ps)
    _mm512_store_ps(lanes, dot);
    float sum = 0.0f;
    for (const float lane : lanes) sum += lane;
    const float rs = r[n];
    const __m512 c = _mm512_set1_ps(rs * rs * rs * sum / static_cast<float>(D));
    for (int64_t i = 0; i < D; i += 16) {
      const __m512 gw = _mm512_mul_ps(_mm512_loadu_ps(g + i), _mm512_loadu_ps(w + i));
      _mm512_storeu_ps(dx + i, _mm512_fnmadd_ps(c, _mm512_loadu_ps(x + i), _mm512_mul_ps(rn, gw)));
    }
  }
}
#endif

struct RmsNormOnePassBackward : public torch::autograd::Function<RmsNormOnePassBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               double eps) {
    torch::Tensor r;
    const auto out = weight * normalised(x, eps, &r);  // x is float32: the casts to and from it are no-ops
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
    if (cpu_has_avx512f() && D % 16 == 0) rows_backward = &backward_rows_avx512;
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
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
         weight.dim() == 1 && x.size(-1) == weight.size(0) && torch::GradMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad()) && at::autocast::is_autocast_enabled(at::kCPU);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (rms_norm_backward_in_one_pass(x, weight)) return RmsNormOnePassBackward::apply(x, weight, eps);
  const auto input_dtype = x.scalar_type();
  return weight * normalised(x.to(torch::kFloat32), eps, nullptr).to(input_dtype);
}

}  // namespace rayless
