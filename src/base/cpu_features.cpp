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

}  // namespace rayless
