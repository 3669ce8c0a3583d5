// avx512_transpose; see avx512_kernels.h.
#include "avx512_kernels.h"


#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

namespace {
RAYLESS_AVX512_INTRINSICS_BEGIN
// Blocks of 32 rows by 16 columns. Rows 2k and 2k+1 are interleaved into 16 32-bit words, one per
// column (each word holds the column's two elements in row order); a 16 x 16 transpose of those words
// then gives each column's 32 elements in row order, one 64-byte store per column.
__attribute__((target("avx512f"))) void transpose_blocks_avx512(const uint16_t* in, uint16_t* out, int64_t rows,
                                                                 int64_t cols, int64_t row_blocks,
                                                                 int64_t col_blocks) {
  for (int64_t rb = 0; rb < row_blocks; ++rb)
    for (int64_t cb = 0; cb < col_blocks; ++cb) {
      const int64_t r0 = rb * 32, c0 = cb * 16;
      __m512i pairs[16];
      for (int k = 0; k < 16; ++k) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + (r0 + 2 * k) * cols + c0));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + (r0 + 2 * k + 1) * cols + c0));
        // per 128-bit lane: unpacklo holds columns 0-3 (lane 0) and 8-11 (lane 1), unpackhi 4-7 and 12-15
        const __m512i w = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_unpacklo_epi16(a, b)),
                                             _mm256_unpackhi_epi16(a, b), 1);
        pairs[k] = _mm512_shuffle_i64x2(w, w, _MM_SHUFFLE(3, 1, 2, 0));  // columns 0-3, 4-7, 8-11, 12-15
      }
      __m512i t[16], u[16], s[16], f[16];
      for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_epi32(pairs[k], pairs[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(pairs[k], pairs[k + 1]);
      }
      for (int k = 0; k < 16; k += 4) {
        u[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        u[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        u[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        u[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
      }
      for (int k = 0; k < 4; ++k) {
        s[k] = _mm512_shuffle_i32x4(u[k], u[k + 4], 0x88);
        s[k + 4] = _mm512_shuffle_i32x4(u[k], u[k + 4], 0xdd);
        s[k + 8] = _mm512_shuffle_i32x4(u[k + 8], u[k + 12], 0x88);
        s[k + 12] = _mm512_shuffle_i32x4(u[k + 8], u[k + 12], 0xdd);
      }
      for (int k = 0; k < 4; ++k) {
        f[k] = _mm512_shuffle_i32x4(s[k], s[k + 8], 0x88);
        f[k + 8] = _mm512_shuffle_i32x4(s[k], s[k + 8], 0xdd);
        f[k + 4] = _mm512_shuffle_i32x4(s[k + 4], s[k + 12], 0x88);
        f[k + 12] = _mm512_shuffle_i32x4(s[k + 4], s[k + 12], 0xdd);
      }
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(out + (c0 + j) * rows + r0, f[j]);
    }
}
RAYLESS_AVX512_INTRINSICS_END
}  // namespace

void transpose_blocks(const uint16_t* in, uint16_t* out, int64_t rows, int64_t cols, int64_t row_blocks,
                      int64_t col_blocks) {
  transpose_blocks_avx512(in, out, rows, cols, row_blocks, col_blocks);
}

}  // namespace rayless::ops::avx512
#endif
