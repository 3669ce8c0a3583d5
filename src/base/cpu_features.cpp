#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <cpuid.h>
#endif

namespace rayless {

bool cpu_has_avx512f() {
#ifdef RAYLESS_X86_KERNELS
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & bit_AVX512F) != 0;
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#ifdef RAYLESS_X86_KERNELS
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;  // libgcc also checks the OS's XSAVE state
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_fma() {
#ifdef RAYLESS_X86_KERNELS
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
#ifdef RAYLESS_X86_KERNELS
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1, amx_tile = (edx >> 24) & 1, avx512f = (ebx >> 16) & 1;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
    const bool avx512_bf16 = (eax >> 5) & 1;
    return amx_bf16 && amx_tile && avx512f && avx512_bf16;
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_bfloat16_units() {
#ifdef RAYLESS_X86_KERNELS
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool amx_bf16 = (edx >> 22) & 1;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return amx_bf16;
    const bool avx512_bf16 = (eax >> 5) & 1;
    return avx512_bf16 || amx_bf16;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace rayless
