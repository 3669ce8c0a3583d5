// avx2_sum_of_squares; see avx2_kernels.h.
#include "avx2_kernels.h"

#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless::ops::avx2 {

#ifdef RAYLESS_X86_KERNELS
namespace {
// squares_float_avx512 for CPUs with AVX2 and no AVX-512: the 8 partial sums as two 4-lane vectors.
__attribute__((target("avx2"), optimize("fp-contract=off"))) int64_t squares_float_avx2(const float* x, int64_t n,
                                                                                        double partial[8]) {
  __m256d low = _mm256_loadu_pd(partial), high = _mm256_loadu_pd(partial + 4);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d v_low = _mm256_cvtps_pd(_mm_loadu_ps(x + i)), v_high = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    low = _mm256_add_pd(low, _mm256_mul_pd(v_low, v_low));
    high = _mm256_add_pd(high, _mm256_mul_pd(v_high, v_high));
  }
  _mm256_storeu_pd(partial, low);
  _mm256_storeu_pd(partial + 4, high);
  return i;
}
}  // namespace
#endif

int64_t sum_of_squares_float(const float* x, int64_t n, double partial[8]) {
#ifdef RAYLESS_X86_KERNELS
  return squares_float_avx2(x, n, partial);
#else
  return 0;
#endif
}

}  // namespace rayless::ops::avx2
