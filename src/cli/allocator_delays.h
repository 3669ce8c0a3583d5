// The allocator the process runs on, as `rayless version` reports it.
#pragma once
#include <string>

namespace rayless::cli {

// "mimalloc X.Y.Z (decommit delay D ms, segment decommit delay S ms)" when mimalloc runs the process
// (linked by the build, CMakeLists.txt "allocator", or preloaded: it is found at run time), else
// "glibc malloc". The delays are mimalloc 2.0's as it read them (its defaults 25 and 500 ms, or the
// user's MIMALLOC_RESET_DELAY / MIMALLOC_DECOMMIT_DELAY and MIMALLOC_SEGMENT_DECOMMIT_DELAY); another
// mimalloc version prints none. They trade memory for step time: freed pages given back sooner are
// faulted in and zeroed again by the next pass (docs/notes/bench-levers.md "Allocator", docs/hpc.md).
std::string running_allocator();

}  // namespace rayless::cli
