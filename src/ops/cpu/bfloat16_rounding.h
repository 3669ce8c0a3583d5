// float32 to bfloat16 as LibTorch's CPU copy rounds (.to(): nearest even, every NaN to 0xFFFF) and back,
// one value at a time, for the CPU's one-pass kernels (16 at a time: x86/avx512/bfloat16_vectors.h).
// Private to src/ops.
#pragma once
#include <cstdint>
#include <cstring>

namespace rayless::ops {

inline float widen_bfloat16(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

inline uint16_t bfloat16_like_copy(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFF;
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace rayless::ops
