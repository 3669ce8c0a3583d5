#include <catch2/catch.hpp>

#include "rayless/runtime/available_memory.h"

using namespace rayless;

TEST_CASE("available memory: /proc/meminfo and cgroup files") {
  CHECK(meminfo_available_bytes("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   12345 kB\n") == 12345 * 1024);
  CHECK(meminfo_available_bytes("MemTotal: 1 kB\n") == -1);
  CHECK(cgroup_bytes("max\n") == -1);
  CHECK(cgroup_bytes("1073741824\n") == 1073741824);
  CHECK(cgroup_bytes("") == -1);
  CHECK(bytes_text(100) == "100 B");
  CHECK(bytes_text(1536) == "1.5 KiB");
  CHECK(bytes_text(3.0 * 1024 * 1024 * 1024 * 1024) == "3.0 TiB");
  // this machine: something is known on the CPU, and two ranks get half of one
  const AvailableMemory one = available_memory(torch::kCPU, 1), two = available_memory(torch::kCPU, 2);
  REQUIRE(one.bytes > 0);
  CHECK(two.bytes <= one.bytes / 2 + one.bytes / 10);
  CHECK_THAT(two.source, Catch::Contains("shared by 2 ranks"));
}
