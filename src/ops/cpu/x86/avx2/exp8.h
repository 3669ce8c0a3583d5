// e^x for 8 floats at a time with AVX2 and FMA, for the decode step's kernels (the softmax of
// decode_attention.cpp and the silu of decode_silu_times.cpp). LibTorch's exp and silu took 1.5-3 ns
// per float at decode sizes; this is a few instructions per 8. Private to src/ops; callers carry
// target("avx2,fma") and run only where the CPU has both.
//
// Method (Cephes' expf): x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2, ln2 split in two parts
// so that n ln2 is exact enough; e^r as 1 + r + r^2 p(r), p of degree 5 fitted on that interval; 2^n put
// into the exponent bits. tests/ops/test_avx2_exp.cpp checks 2 ulp against float64's exp; the largest
// error it met was 0.96 ulp over 378,832 points. x below -87.336 (e^x under the smallest normal float)
// gives 0, -inf included; x above 88.376 gives +inf (float's own limit is 88.72: the values between are
// not needed by softmax, whose arguments are <= 0, nor by silu, where 1 / (1 + e^-g) is 0 either way);
// NaN stays NaN.
#pragma once
#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx2 {

__attribute__((target("avx2,fma"))) inline __m256 exp8(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.33654475f), highest = _mm256_set1_ps(88.37626266f);
  const __m256 to_zero = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
  const __m256 to_infinity = _mm256_cmp_ps(x, highest, _CMP_GT_OQ);
  // max/min return their second operand when either is NaN: x's NaN passes through
  const __m256 clamped = _mm256_min_ps(highest, _mm256_max_ps(lowest, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), clamped);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 e_r = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  // 2^n with -126 <= n <= 127: (n + 127) in the exponent field
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  const __m256 two_to_n = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  __m256 result = _mm256_mul_ps(e_r, two_to_n);
  result = _mm256_andnot_ps(to_zero, result);
  return _mm256_blendv_ps(result, _mm256_set1_ps(__builtin_inff()), to_infinity);
}

}  // namespace rayless::ops::avx2
#endif
