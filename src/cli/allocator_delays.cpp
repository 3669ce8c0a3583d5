#include "cli/allocator_delays.h"

#include <dlfcn.h>

#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#endif

namespace rayless::cli {

namespace {
// mimalloc is found at run time, as `rayless version` finds it: a build without it, or a preloaded
// one, needs no header. The option numbers are mimalloc 2.0's (enum mi_option_e); 2.1 renamed and
// renumbered them, so another version reports nothing.
constexpr int kDecommitDelayOption = 15;         // mi_option_decommit_delay (env MIMALLOC_RESET_DELAY too)
constexpr int kSegmentDecommitDelayOption = 23;  // mi_option_segment_decommit_delay
#if defined(MI_MALLOC_VERSION) && MI_MALLOC_VERSION >= 200 && MI_MALLOC_VERSION < 210
static_assert(mi_option_decommit_delay == kDecommitDelayOption, "mimalloc 2.0's decommit delay option");
static_assert(mi_option_segment_decommit_delay == kSegmentDecommitDelayOption, "mimalloc 2.0's segment option");
#endif
}  // namespace

std::string allocator_delays() {
  auto* version = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "mi_version"));
  auto* get = reinterpret_cast<long (*)(int)>(dlsym(RTLD_DEFAULT, "mi_option_get"));
  if (!version || !get || version() < 200 || version() >= 210) return "";
  return "decommit delay " + std::to_string(get(kDecommitDelayOption)) + " ms, segment decommit delay " +
         std::to_string(get(kSegmentDecommitDelayOption)) + " ms";
}

}  // namespace rayless::cli
