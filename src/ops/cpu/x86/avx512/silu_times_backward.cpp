// avx512_silu_times_backward; see avx512_kernels.h.
#include "avx512_kernels.h"

#include "bfloat16_vectors.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

namespace {
RAYLESS_AVX512_INTRINSICS_BEGIN
// e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), e^r by its Taylor
// series to r^7 (remainder below 6e-9 relative, under float32's 6e-8 step), times 2^n by scalef, which
// gives inf and 0 beyond float32's range
__attribute__((target("avx512f"))) inline __m512 exp_ps(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx512f"))) void rows_avx512(const uint16_t* gate, const uint16_t* up, const uint16_t* grad,
                                                     uint16_t* product, uint16_t* grad_gate, uint16_t* grad_up,
                                                     int64_t count) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i + 16 <= count; i += 16) {
    const __m512 x = avx512::load_bfloat16(gate + i), u = avx512::load_bfloat16(up + i), d = avx512::load_bfloat16(grad + i);
    const __m512 denominator = _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x)));
    const __m512 sigmoid = _mm512_div_ps(one, denominator);
    const __m512 silu = avx512::round_to_bfloat16(_mm512_div_ps(x, denominator));
    avx512::store_bfloat16(product + i, _mm512_mul_ps(silu, u));
    avx512::store_bfloat16(grad_up + i, _mm512_mul_ps(d, silu));
    const __m512 dy = avx512::round_to_bfloat16(_mm512_mul_ps(d, u));
    const __m512 slope = _mm512_add_ps(one, _mm512_mul_ps(x, _mm512_sub_ps(one, sigmoid)));
    avx512::store_bfloat16(grad_gate + i, _mm512_mul_ps(_mm512_mul_ps(dy, sigmoid), slope));
  }
}
RAYLESS_AVX512_INTRINSICS_END
}  // namespace

int64_t silu_times_backward_rows(const uint16_t* gate, const uint16_t* up, const uint16_t* grad, uint16_t* product,
                                 uint16_t* grad_gate, uint16_t* grad_up, int64_t count) {
  rows_avx512(gate, up, grad, product, grad_gate, grad_up, count);
  return count / 16 * 16;
}

}  // namespace rayless::ops::avx512
#endif
