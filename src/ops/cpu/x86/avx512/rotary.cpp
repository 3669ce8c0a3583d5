// avx512_rotary_forward and avx512_rotary_backward; see avx512_kernels.h.
#include "avx512_kernels.h"

#include "bfloat16_vectors.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

namespace {
RAYLESS_AVX512_INTRINSICS_BEGIN
__attribute__((target("avx512f"))) void backward_avx512(const float* g, const float* cos, const float* sin,
                                                         int64_t rows, int64_t heads, int64_t D, c10::BFloat16* dx) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r, g += D, dx += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; j += 16) {
      const __m512 low = _mm512_loadu_ps(g + j), high = _mm512_loadu_ps(g + j + half);
      avx512::store_bfloat16(dx + j, _mm512_add_ps(_mm512_mul_ps(low, _mm512_loadu_ps(c + j)),
                                                   _mm512_mul_ps(high, _mm512_loadu_ps(s + j + half))),
                             0x7FC0);
      avx512::store_bfloat16(dx + j + half, _mm512_sub_ps(_mm512_mul_ps(high, _mm512_loadu_ps(c + j + half)),
                                                  _mm512_mul_ps(low, _mm512_loadu_ps(s + j))),
                             0x7FC0);  // c10::BFloat16's NaN, as backward_scalar
    }
  }
}

__attribute__((target("avx512f"), optimize("fp-contract=off"))) void forward_avx512(
    const c10::BFloat16* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
    c10::BFloat16* out) {
  const int64_t half = D / 2;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r, x += D, out += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; j += 16) {
      const __m512 low = avx512::load_bfloat16(x + j), high = avx512::load_bfloat16(x + j + half);
      const __m512 negated_high = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(high), _mm512_castps_si512(sign)));
      avx512::store_bfloat16(out + j, _mm512_add_ps(_mm512_mul_ps(low, _mm512_loadu_ps(c + j)),
                                   _mm512_mul_ps(negated_high, _mm512_loadu_ps(s + j))));
      avx512::store_bfloat16(out + j + half, _mm512_add_ps(_mm512_mul_ps(high, _mm512_loadu_ps(c + j + half)),
                                          _mm512_mul_ps(low, _mm512_loadu_ps(s + j + half))));
    }
  }
}
RAYLESS_AVX512_INTRINSICS_END
}  // namespace

void rotary_forward(const c10::BFloat16* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
                    c10::BFloat16* out) {
  forward_avx512(x, cos, sin, rows, heads, D, out);
}

void rotary_backward(const float* g, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
                     c10::BFloat16* dx) {
  backward_avx512(g, cos, sin, rows, heads, D, dx);
}

}  // namespace rayless::ops::avx512
#endif
