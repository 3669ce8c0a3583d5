// avx512_adamw; see avx512_kernels.h. Built with -ffp-contract=off -fno-math-errno -O3, as the portable
// loop (cpu/adamw_update.cpp, CMakeLists.txt).
#include "avx512_kernels.h"

#include "ops/cpu/adamw_scalars.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

namespace {
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
}  // namespace

int64_t adamw_update_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin,
                           int64_t end, const AdamWHyper& hyper) {
  return update_float_avx512(param, grad, exp_avg, exp_avg_sq, begin, end, hyper);
}

}  // namespace rayless::ops::avx512
#endif
