// How much memory a rank can still take, read before a run loads anything: on the CPU the smaller of
// the host's MemAvailable (/proc/meminfo) and the cgroup's limit less its usage (v2 memory.max /
// memory.current, v1 memory.limit_in_bytes / memory.usage_in_bytes), shared by the ranks on the node;
// on a CUDA device its free memory as the CUDA runtime counts it (cudaMemGetInfo, found at run time so
// that no CUDA header is needed here).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace rayless {

struct AvailableMemory {
  int64_t bytes = -1;  // -1: not known (then nothing is refused)
  std::string source;  // "host MemAvailable 21.3 GiB shared by 2 ranks", "cuda:0 free"
};

AvailableMemory available_memory(const torch::Device& device, int ranks_on_node);

// MemAvailable of /proc/meminfo's text in bytes (-1 when absent); a cgroup file's limit ("max": -1).
int64_t meminfo_available_bytes(const std::string& meminfo);
int64_t cgroup_bytes(const std::string& text);

// "1.5 GiB", "312 MiB", "12 KiB", "100 B"
std::string bytes_text(double bytes);

}  // namespace rayless
