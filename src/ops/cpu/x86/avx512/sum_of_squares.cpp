// avx512_sum_of_squares; see avx512_kernels.h.
#include "avx512_kernels.h"


#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

namespace {
RAYLESS_AVX512_INTRINSICS_BEGIN
// sum_of_squares' loop over whole groups of 8 float32 values, the 8 float64 partial sums as the 8
// lanes of one vector: each lane adds the same squares in the same order, each product and sum
// rounded (no fused multiply-add), so the sums are the scalar loop's bit for bit. Returns where the
// scalar loop goes on.
__attribute__((target("avx512f"), optimize("fp-contract=off"))) int64_t squares_float_avx512(const float* x, int64_t n,
                                                                                             double partial[8]) {
  __m512d sums = _mm512_loadu_pd(partial);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    sums = _mm512_add_pd(sums, _mm512_mul_pd(v, v));
  }
  _mm512_storeu_pd(partial, sums);
  return i;
}
RAYLESS_AVX512_INTRINSICS_END
}  // namespace

int64_t sum_of_squares_float(const float* x, int64_t n, double partial[8]) { return squares_float_avx512(x, n, partial); }

}  // namespace rayless::ops::avx512
#endif
