// Which backend's table a device uses; see backend.h.
#include "backend.h"

#include <atomic>

namespace rayless::ops {

namespace {
std::atomic<const BackendTable*> cpu_runs{nullptr};  // CpuRunsTable's
}  // namespace

const BackendTable& backend_for(const torch::Device& device) {
  static const BackendTable none{"none"};
  switch (device.type()) {
    case torch::kCPU: {
      const BackendTable* other = cpu_runs.load(std::memory_order_relaxed);
      return other ? *other : cpu_table();
    }
    case torch::kCUDA: return cuda_table();
    default: return none;
  }
}

CpuRunsTable::CpuRunsTable(const BackendTable& table) : previous_(cpu_runs.exchange(&table)) {}
CpuRunsTable::~CpuRunsTable() { cpu_runs.store(previous_); }

}  // namespace rayless::ops
