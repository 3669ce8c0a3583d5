// Where a run's time goes on the device: LibTorch's Kineto profiler around one part of it (ATen
// operators on the host and, on a CUDA device, CUPTI's kernels, copies and runtime calls), summarised
// as the figures that say whether a run is host-bound (the device's busy share of the wall time,
// kernel launches and synchronisations per step) and which kernels and operators take the time.
// rayless train --profile-step and rayless-bench generation --profile write it (docs/gpu.md).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace rayless {

class OpProfile {
 public:
  // Starts recording: host operators always, the CUDA device's activity when `device` is CUDA.
  explicit OpProfile(const torch::Device& device);
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  ~OpProfile();  // stops recording if stop() was not called

  // Stops recording and summarises the run: `steps` is what "per step" divides by (decode steps,
  // optimizer steps). Waits for the device first, so that its last kernels are in the record.
  nlohmann::json stop(int64_t steps);

 private:
  torch::Device device_;
  bool running_ = false;
};

// The summary in one console line: steps, host operators per step and, on CUDA, the device's busy
// share, kernels and host waits per step; the first kernel (or operator) by time.
std::string profile_line(const nlohmann::json& summary);

}  // namespace rayless
