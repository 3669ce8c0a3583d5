// What the CPU running this process can do, for the kernels that carry their own target attributes
// (the rest of the build needs no flags beyond the baseline).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAYLESS_X86_KERNELS 1  // kernels with x86 target attributes are compiled in
#endif

namespace rayless {

// AVX-512 Foundation; false off x86-64.
bool cpu_has_avx512f();

}  // namespace rayless
