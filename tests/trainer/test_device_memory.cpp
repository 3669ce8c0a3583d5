// device_memory_peaks reads the device allocator's aggregate peaks, for the device index it is given.
// No GPU here: a stand-in allocator registered for the PrivateUse1 device type answers with made-up
// statistics, through the same device-generic interface that CUDA's caching allocator implements.
#include <catch2/catch.hpp>

#include <c10/core/CachingDeviceAllocator.h>

#include "rayless/trainer/metrics.h"

using namespace rayless;

namespace {

constexpr int64_t MiB = 1024 * 1024;

// Answers getDeviceStats only; the aggregate peaks differ from the current values and from the
// per-pool entries, so reading the wrong field or pool gives another number.
struct StandInAllocator final : c10::DeviceAllocator {
  c10::DeviceIndex asked = -1;

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    asked = device;
    c10::CachingDeviceAllocator::DeviceStats stats;
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    constexpr auto small = static_cast<size_t>(c10::CachingAllocator::StatType::SMALL_POOL);
    stats.allocated_bytes[all].current = 1 * MiB;
    stats.allocated_bytes[all].peak = 5 * MiB;
    stats.allocated_bytes[small].peak = 2 * MiB;
    stats.reserved_bytes[all].current = 6 * MiB;
    stats.reserved_bytes[all].peak = 9 * MiB;
    stats.reserved_bytes[small].peak = 4 * MiB;
    stats.requested_bytes[all].peak = 3 * MiB;
    return stats;
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex) override {}
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override { return {0, 0}; }
  c10::DataPtr allocate(size_t) override { throw std::logic_error("the stand-in allocates nothing"); }
  void copy_data(void*, const void*, std::size_t) const override {}
};

}  // namespace

TEST_CASE("device_memory_peaks: nothing on the CPU") {
  CHECK_FALSE(device_memory_peaks(c10::Device(c10::kCPU)).has_value());
}

TEST_CASE("device_memory_peaks: the allocator's aggregate peaks of the device asked for") {
  static StandInAllocator allocator;
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
  const auto peaks = device_memory_peaks(c10::Device(c10::DeviceType::PrivateUse1, 1));
  REQUIRE(peaks.has_value());
  CHECK(allocator.asked == 1);
  CHECK(peaks->allocated_bytes == 5 * MiB);
  CHECK(peaks->reserved_bytes == 9 * MiB);
}
