// mimalloc's delays before it returns freed memory to the kernel, as `rayless version` reports them.
#pragma once
#include <string>

namespace rayless::cli {

// "decommit delay D ms, segment decommit delay S ms" as the running mimalloc 2.0 holds them (its
// defaults 25 and 500 ms, or the user's MIMALLOC_RESET_DELAY / MIMALLOC_DECOMMIT_DELAY and
// MIMALLOC_SEGMENT_DECOMMIT_DELAY); empty when the process does not run on mimalloc 2.0. They trade
// memory for step time: freed pages given back sooner are faulted in and zeroed again by the next
// pass (docs/benchmarks.md "Allocator", docs/hpc.md).
std::string allocator_delays();

}  // namespace rayless::cli
