// cpu_features.h against what the kernel reports in /proc/cpuinfo (Linux), a second source for the
// same CPUID bit.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "rayless/base/cpu_features.h"

TEST_CASE("cpu_has_avx512f agrees with /proc/cpuinfo's flags") {
  std::ifstream cpuinfo("/proc/cpuinfo");
  if (!cpuinfo) {
    WARN("no /proc/cpuinfo here: nothing to compare with");
    return;
  }
  bool listed = false;
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream flags(line.substr(line.find(':') + 1));
    for (std::string flag; flags >> flag;) listed |= flag == "avx512f";
    break;  // the first processor's flags
  }
#ifdef RAYLESS_X86_KERNELS
  CHECK(rayless::cpu_has_avx512f() == listed);
#else
  CHECK_FALSE(rayless::cpu_has_avx512f());
#endif
}
