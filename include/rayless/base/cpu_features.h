// What the CPU running this process can do, for the kernels that carry their own target attributes
// (the rest of the build needs no flags beyond the baseline).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAYLESS_X86_KERNELS 1  // kernels with x86 target attributes are compiled in
#endif

// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_* values and then warn that
// they may be used uninitialized (GCC bug 105593); kernels that meet it sit between these two.
#if defined(__GNUC__) && !defined(__clang__)
#define RAYLESS_AVX512_INTRINSICS_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define RAYLESS_AVX512_INTRINSICS_END _Pragma("GCC diagnostic pop")
#else
#define RAYLESS_AVX512_INTRINSICS_BEGIN
#define RAYLESS_AVX512_INTRINSICS_END
#endif

namespace rayless {

// AVX-512 Foundation; false off x86-64.
bool cpu_has_avx512f();

}  // namespace rayless
