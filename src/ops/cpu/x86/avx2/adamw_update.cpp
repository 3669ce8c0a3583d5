// avx2_adamw; see avx2_kernels.h. Built with -ffp-contract=off -fno-math-errno -O3, as the portable loop
// (cpu/adamw_update.cpp, CMakeLists.txt).
#include "avx2_kernels.h"

#include "ops/cpu/adamw_scalars.h"
#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless::ops::avx2 {

#ifdef RAYLESS_X86_KERNELS
namespace {
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
}  // namespace
#endif

int64_t adamw_update_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin,
                           int64_t end, const AdamWHyper& hyper) {
#ifdef RAYLESS_X86_KERNELS
  return update_float_avx2(param, grad, exp_avg, exp_avg_sq, begin, end, hyper);
#else
  return begin;
#endif
}

}  // namespace rayless::ops::avx2
