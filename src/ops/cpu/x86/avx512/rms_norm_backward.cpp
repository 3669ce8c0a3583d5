// avx512_rms_norm_backward; see avx512_kernels.h.
#include "avx512_kernels.h"


#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

namespace {
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
}  // namespace

void rms_norm_backward_rows(const float* g, const float* x, const float* w, const float* r, int64_t rows, int64_t D,
                            float* dx, float* gw_sum) {
  backward_rows_avx512(g, x, w, r, rows, D, dx, gw_sum);
}

}  // namespace rayless::ops::avx512
#endif
