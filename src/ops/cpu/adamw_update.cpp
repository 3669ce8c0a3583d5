#include "rayless/ops/adamw_update.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "rayless/base/cpu_features.h"
#include "rayless/base/error.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless {

namespace {

// The scalars as torch's kernels see them: converted once to the compute type.
template <typename opmath_t>
struct Scalars {
  opmath_t decay, grad_scale, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, step_size, eps;
  explicit Scalars(const AdamWHyper& h)
      : decay(static_cast<opmath_t>(1 - h.lr * h.weight_decay)),
        grad_scale(static_cast<opmath_t>(h.grad_scale)),
        one_minus_beta1(static_cast<opmath_t>(1 - h.beta1)),
        beta2(static_cast<opmath_t>(h.beta2)),
        one_minus_beta2(static_cast<opmath_t>(1 - h.beta2)),
        bias_correction2_sqrt(static_cast<opmath_t>(std::sqrt(1 - std::pow(h.beta2, double(h.step))))),
        step_size(static_cast<opmath_t>(-(h.lr / (1 - std::pow(h.beta1, double(h.step)))))),
        eps(static_cast<opmath_t>(h.eps)) {}
};

template <typename scalar_t>
void update_range(scalar_t* __restrict param, const scalar_t* __restrict grad, scalar_t* __restrict exp_avg,
                  scalar_t* __restrict exp_avg_sq, int64_t begin, int64_t end, const AdamWHyper& h) {
  using opmath_t = at::opmath_type<scalar_t>;
  const Scalars<opmath_t> c(h);
  for (int64_t i = begin; i < end; ++i) {
    opmath_t p = static_cast<opmath_t>(param[i]) * c.decay;
    // the clip's product, rounded to the gradient's dtype as mul_ would store it
    const opmath_t g = static_cast<scalar_t>(static_cast<opmath_t>(grad[i]) * c.grad_scale);
    opmath_t m = exp_avg[i];
    m = m + c.one_minus_beta1 * (g - m);
    opmath_t v = exp_avg_sq[i];
    v = v * c.beta2 + c.one_minus_beta2 * g * g;
    const opmath_t denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    p = p + c.step_size * (m / denom);
    param[i] = static_cast<scalar_t>(p);
    exp_avg[i] = static_cast<scalar_t>(m);
    exp_avg_sq[i] = static_cast<scalar_t>(v);
  }
}

#ifdef RAYLESS_X86_KERNELS
RAYLESS_AVX512_INTRINSICS_BEGIN
// update_range for float32, 16 elements at a time: the same operations in the same order, each
// rounded (no fused multiply-add: fp-contract is off), so every element comes out bit for bit as there.
// The scalar loop's tail covers the rest.
__attribute__((target("avx512f"), optimize("fp-contract=off"))) int64_t update_float_avx512(
    float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin, int64_t end,
    const AdamWHyper& h) {
  const Scalars<float> c(h);
  const __m512 decay = _mm512_set1_ps(c.decay), grad_scale = _mm512_set1_ps(c.grad_scale),
               one_minus_beta1 = _mm512_set1_ps(c.one_minus_beta1), beta2 = _mm512_set1_ps(c.beta2),
               one_minus_beta2 = _mm512_set1_ps(c.one_minus_beta2),
               bias_correction2_sqrt = _mm512_set1_ps(c.bias_correction2_sqrt),
               step_size = _mm512_set1_ps(c.step_size), eps = _mm512_set1_ps(c.eps);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(param + i), decay);
    const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), grad_scale);
    __m512 m = _mm512_loadu_ps(exp_avg + i);
    m = _mm512_add_ps(m, _mm512_mul_ps(one_minus_beta1, _mm512_sub_ps(g, m)));
    __m512 v = _mm512_loadu_ps(exp_avg_sq + i);
    v = _mm512_add_ps(_mm512_mul_ps(v, beta2), _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bias_correction2_sqrt), eps);
    p = _mm512_add_ps(p, _mm512_mul_ps(step_size, _mm512_div_ps(m, denom)));
    _mm512_storeu_ps(param + i, p);
    _mm512_storeu_ps(exp_avg + i, m);
    _mm512_storeu_ps(exp_avg_sq + i, v);
  }
  return i;
}
RAYLESS_AVX512_INTRINSICS_END

// update_float_avx512 for CPUs with AVX2 and no AVX-512, 8 elements at a time, the same operations.
__attribute__((target("avx2"), optimize("fp-contract=off"))) int64_t update_float_avx2(
    float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin, int64_t end,
    const AdamWHyper& h) {
  const Scalars<float> c(h);
  const __m256 decay = _mm256_set1_ps(c.decay), grad_scale = _mm256_set1_ps(c.grad_scale),
               one_minus_beta1 = _mm256_set1_ps(c.one_minus_beta1), beta2 = _mm256_set1_ps(c.beta2),
               one_minus_beta2 = _mm256_set1_ps(c.one_minus_beta2),
               bias_correction2_sqrt = _mm256_set1_ps(c.bias_correction2_sqrt),
               step_size = _mm256_set1_ps(c.step_size), eps = _mm256_set1_ps(c.eps);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(param + i), decay);
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), grad_scale);
    __m256 m = _mm256_loadu_ps(exp_avg + i);
    m = _mm256_add_ps(m, _mm256_mul_ps(one_minus_beta1, _mm256_sub_ps(g, m)));
    __m256 v = _mm256_loadu_ps(exp_avg_sq + i);
    v = _mm256_add_ps(_mm256_mul_ps(v, beta2), _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bias_correction2_sqrt), eps);
    p = _mm256_add_ps(p, _mm256_mul_ps(step_size, _mm256_div_ps(m, denom)));
    _mm256_storeu_ps(param + i, p);
    _mm256_storeu_ps(exp_avg + i, m);
    _mm256_storeu_ps(exp_avg_sq + i, v);
  }
  return i;
}
#endif

// The elements the vector loop updates, from `begin`; returns where the scalar loop goes on.
template <typename scalar_t>
int64_t update_vector_part(scalar_t*, const scalar_t*, scalar_t*, scalar_t*, int64_t begin, int64_t, const AdamWHyper&) {
  return begin;  // float32 only
}
int64_t update_vector_part(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin,
                           int64_t end, const AdamWHyper& h) {
#ifdef RAYLESS_X86_KERNELS
  if (cpu_has_avx512f()) return update_float_avx512(param, grad, exp_avg, exp_avg_sq, begin, end, h);
  if (cpu_has_avx2()) return update_float_avx2(param, grad, exp_avg, exp_avg_sq, begin, end, h);
#endif
  return begin;
}

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
    at::parallel_for(0, param.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      begin = update_vector_part(p, g, m, v, begin, end, hyper);
      update_range(p, g, m, v, begin, end, hyper);
    });
  });
}

}  // namespace rayless
