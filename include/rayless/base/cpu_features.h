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

// AVX2 with the operating system saving the 256-bit registers; false off x86-64. AdamW's float32
// update and the gradient norm's sums have an AVX2 loop beside their AVX-512 one, for CPUs without
// AVX-512 (AMD before Zen 4); the bfloat16 training kernels fall back to their portable loops there.
bool cpu_has_avx2();

// FMA3 (fused multiply-add on 256-bit registers), which the AVX2 decode kernels (avx2_linear,
// avx2_decode_attention, avx2_decode_rms_norm, avx2_decode_silu_times) need beside AVX2; false off x86-64.
bool cpu_has_fma();

// AMX-BF16 tiles with AVX512-BF16 and AVX-512F beside them, what the amx_linear kernel runs on (it
// still asks Linux for the tile state); false off x86-64.
bool cpu_has_amx_bf16();

// bfloat16 matrix units (AVX512-BF16 or AMX-BF16): where they are missing, LibTorch emulates bfloat16
// products in float32 (9.7 against 81 GFLOP/s for float32 ones on an AMD EPYC with AVX2) and their
// rounding depends on the operands' layout, so train.bf16_products = auto runs them as float32
// products there (ops/ops.h); false off x86-64.
bool cpu_has_bfloat16_units();

}  // namespace rayless
