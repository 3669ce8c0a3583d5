// Metrics of one optimizer step under TRL's names (plus rayless's own), metrics.jsonl on rank 0 and
// the console progress line. Values are reduced across ranks by the trainer before they get here.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include <c10/core/Device.h>

namespace rayless {

using StepMetrics = std::map<std::string, double>;

class MetricsLog {
 public:
  // Opens path for appending. resume_step >= 0: lines of steps after it (written by an interrupted
  // run after its last checkpoint) are dropped first, so every step appears once, and so are lines
  // that are not JSON (torn by a crash in the middle of a write), with a warning.
  MetricsLog(const std::filesystem::path& path, int64_t resume_step = -1);
  // One JSON line {"step": .., ...}, flushed; a failed write (a full disk) throws RuntimeError naming
  // the file and the reason instead of losing the line silently.
  void write(int64_t step, const StepMetrics& metrics);
 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// "step 12/100 | reward 0.512 | kl 0.0012 | tok/s 1234 | s/step 1.20 | ETA 3m12s" (missing fields left out)
std::string progress_line(int64_t step, int64_t max_steps, const StepMetrics& metrics, double eta_seconds);

// Peak resident set size of this process in bytes (VmHWM), 0 when unknown.
int64_t peak_rss_bytes();

// The device's caching allocator's own peaks since the process started (what torch.cuda's
// max_memory_allocated and max_memory_reserved read): bytes held by tensors, and bytes the allocator
// took from the device, cached free blocks included.
struct DeviceMemoryPeaks {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};
// nullopt on the CPU. Reads LibTorch's device-generic allocator interface, so one source compiles
// against CPU and CUDA LibTorch alike; the caller syncs nothing with the device.
std::optional<DeviceMemoryPeaks> device_memory_peaks(const c10::Device& device);

}  // namespace rayless
