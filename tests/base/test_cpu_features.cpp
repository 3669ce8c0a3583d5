// cpu_features.h against what the kernel reports in /proc/cpuinfo (Linux), a second source for the
// same CPUID bit.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "rayless/base/cpu_features.h"

namespace {

// Whether the first processor's "flags" line in /proc/cpuinfo lists `wanted`.
bool cpuinfo_lists(const std::string& wanted) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream flags(line.substr(line.find(':') + 1));
    for (std::string flag; flags >> flag;)
      if (flag == wanted) return true;
    return false;  // the first processor's flags
  }
  return false;
}

}  // namespace

TEST_CASE("cpu_has_avx512f, cpu_has_avx2, cpu_has_fma, cpu_has_bfloat16_units and cpu_has_amx_bf16 agree with /proc/cpuinfo's flags") {
  if (!std::ifstream("/proc/cpuinfo")) {
    WARN("no /proc/cpuinfo here: nothing to compare with");
    return;
  }
  INFO("avx512f listed: " << cpuinfo_lists("avx512f") << ", avx2: " << cpuinfo_lists("avx2")
                           << ", avx512_bf16: " << cpuinfo_lists("avx512_bf16") << ", amx_bf16: " << cpuinfo_lists("amx_bf16"));
#ifdef RAYLESS_X86_KERNELS
  CHECK(rayless::cpu_has_avx512f() == cpuinfo_lists("avx512f"));
  CHECK(rayless::cpu_has_avx2() == cpuinfo_lists("avx2"));
  CHECK(rayless::cpu_has_fma() == cpuinfo_lists("fma"));
  CHECK(rayless::cpu_has_bfloat16_units() == (cpuinfo_lists("avx512_bf16") || cpuinfo_lists("amx_bf16")));
  CHECK(rayless::cpu_has_amx_bf16() == (cpuinfo_lists("amx_bf16") && cpuinfo_lists("amx_tile") &&
                                        cpuinfo_lists("avx512f") && cpuinfo_lists("avx512_bf16")));
#else
  CHECK_FALSE(rayless::cpu_has_avx512f());
  CHECK_FALSE(rayless::cpu_has_avx2());
  CHECK_FALSE(rayless::cpu_has_fma());
  CHECK_FALSE(rayless::cpu_has_bfloat16_units());
  CHECK_FALSE(rayless::cpu_has_amx_bf16());
#endif
}
