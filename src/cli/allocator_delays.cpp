#include "cli/allocator_delays.h"

#include <dlfcn.h>

#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#endif

namespace rayless::cli {

namespace {
// mimalloc is found at run time, as `rayless version` finds it: a build without it, or a preloaded
// one, needs no header. The option numbers are mimalloc 2.0's (enum mi_option_e); 2.1 renamed and
// renumbered them, so another version reports no delays.
constexpr int kDecommitDelayOption = 15;         // mi_option_decommit_delay (env MIMALLOC_RESET_DELAY too)
constexpr int kSegmentDecommitDelayOption = 23;  // mi_option_segment_decommit_delay
#if defined(MI_MALLOC_VERSION) && MI_MALLOC_VERSION >= 200 && MI_MALLOC_VERSION < 210
static_assert(mi_option_decommit_delay == kDecommitDelayOption, "mimalloc 2.0's decommit delay option");
static_assert(mi_option_segment_decommit_delay == kSegmentDecommitDelayOption, "mimalloc 2.0's segment option");
#endif

int mimalloc_version() {  // 209 for 2.0.9; 0 when mimalloc does not run the process
  auto* version = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "mi_version"));
  return version ? version() : 0;
}

// "decommit delay D ms, segment decommit delay S ms"; empty unless mimalloc 2.0 runs the process
std::string allocator_delays() {
  const int version = mimalloc_version();
  auto* get = reinterpret_cast<long (*)(int)>(dlsym(RTLD_DEFAULT, "mi_option_get"));
  if (!get || version < 200 || version >= 210) return "";
  return "decommit delay " + std::to_string(get(kDecommitDelayOption)) + " ms, segment decommit delay " +
         std::to_string(get(kSegmentDecommitDelayOption)) + " ms";
}
}  // namespace

std::string running_allocator() {
  const int v = mimalloc_version();
  if (v == 0) return "glibc malloc";
  const std::string delays = allocator_delays();
  return "mimalloc " + std::to_string(v / 100) + "." + std::to_string(v / 10 % 10) + "." + std::to_string(v % 10) +
         (delays.empty() ? "" : " (" + delays + ")");
}

}  // namespace rayless::cli
