#include "rayless/runtime/available_memory.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "rayless/base/error.h"

namespace rayless {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in.good()) return "";
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The cgroup's headroom: limit less usage (-1 when there is no limit or no cgroup file)
int64_t cgroup_headroom() {
  // v2: the process's own cgroup (/proc/self/cgroup "0::/path"), then the root's files
  std::string own;
  std::istringstream lines(read_small_file("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("0::", 0) == 0) own = line.substr(3);
  for (const std::string& dir : {"/sys/fs/cgroup" + own, std::string("/sys/fs/cgroup")}) {
    const int64_t limit = cgroup_bytes(read_small_file(dir + "/memory.max"));
    if (limit < 0) continue;
    const int64_t used = std::max<int64_t>(0, cgroup_bytes(read_small_file(dir + "/memory.current")));
    return std::max<int64_t>(0, limit - used);
  }
  const int64_t limit = cgroup_bytes(read_small_file("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
  if (limit < 0 || limit >= (int64_t{1} << 60)) return -1;  // v1 writes a huge number for "no limit"
  const int64_t used = std::max<int64_t>(0, cgroup_bytes(read_small_file("/sys/fs/cgroup/memory/memory.usage_in_bytes")));
  return std::max<int64_t>(0, limit - used);
}

AvailableMemory device_memory(const torch::Device& device) {
  // the CUDA runtime that LibTorch loaded; cudaError_t is an int, 0 = success
  using GetDevice = int (*)(int*);
  using SetDevice = int (*)(int);
  using MemGetInfo = int (*)(size_t*, size_t*);
  auto get_device = reinterpret_cast<GetDevice>(dlsym(RTLD_DEFAULT, "cudaGetDevice"));
  auto set_device = reinterpret_cast<SetDevice>(dlsym(RTLD_DEFAULT, "cudaSetDevice"));
  auto mem_get_info = reinterpret_cast<MemGetInfo>(dlsym(RTLD_DEFAULT, "cudaMemGetInfo"));
  if (!get_device || !set_device || !mem_get_info) return {};
  int previous = 0;
  if (get_device(&previous) != 0 || set_device(device.index() < 0 ? 0 : device.index()) != 0) return {};
  size_t free = 0, total = 0;
  const int status = mem_get_info(&free, &total);
  set_device(previous);
  if (status != 0) return {};
  return {static_cast<int64_t>(free), str(device.str(), " free memory ", bytes_text(static_cast<double>(free)), " of ",
                                          bytes_text(static_cast<double>(total)))};
}

}  // namespace

int64_t meminfo_available_bytes(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) return static_cast<int64_t>(kib) * 1024;
  }
  return -1;
}

int64_t cgroup_bytes(const std::string& text) {
  long long value = 0;
  if (text.rfind("max", 0) == 0 || std::sscanf(text.c_str(), "%lld", &value) != 1 || value < 0) return -1;
  return static_cast<int64_t>(value);
}

std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 6) bytes /= 1024.0, ++unit;
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

AvailableMemory available_memory(const torch::Device& device, int ranks_on_node) {
  if (device.is_cuda()) return device_memory(device);
  const int64_t host = meminfo_available_bytes(read_small_file("/proc/meminfo"));
  const int64_t cgroup = cgroup_headroom();
  if (host < 0 && cgroup < 0) return {};
  const bool limited_by_cgroup = cgroup >= 0 && (host < 0 || cgroup < host);
  const int64_t bytes = limited_by_cgroup ? cgroup : host;
  const int ranks = std::max(1, ranks_on_node);
  return {bytes / ranks, str(limited_by_cgroup ? "the cgroup's memory limit leaves " : "host MemAvailable ",
                             bytes_text(static_cast<double>(bytes)), ranks > 1 ? str(" shared by ", ranks, " ranks") : "")};
}

}  // namespace rayless
