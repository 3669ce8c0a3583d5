// float32 to bfloat16 as LibTorch's CPU copy rounds (.to(): nearest even, every NaN to 0xFFFF) and
// back, 16 values at a time, for the AVX-512 kernels (one at a time: cpu/bfloat16_rounding.h). Compiled
// where RAYLESS_X86_KERNELS is defined; its users sit inside RAYLESS_AVX512_INTRINSICS_BEGIN/END.
// Private to src/ops.
#pragma once
#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>

namespace rayless::ops::avx512 {

__attribute__((target("avx512f"))) inline __m512 load_bfloat16(const void* p) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p))), 16));
}

// rounded to nearest even, NaN to nan_bits (0xFFFF: LibTorch's copy; 0x7FC0: c10::BFloat16's); the
// result's bits in the low 16 bits of each 32-bit lane
__attribute__((target("avx512f"))) inline __m512i bfloat16_bits(__m512 v, int nan_bits = 0xFFFF) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(nan_bits));
}

__attribute__((target("avx512f"))) inline void store_bfloat16(void* p, __m512 v, int nan_bits = 0xFFFF) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bfloat16_bits(v, nan_bits)));
}

// v rounded to bfloat16 and widened back: what a bfloat16 intermediate holds
__attribute__((target("avx512f"))) inline __m512 round_to_bfloat16(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(bfloat16_bits(v), 16));
}

}  // namespace rayless::ops::avx512
#endif
