// The optimizer step's one read to the host (issue 48 §3). The guard's flags, the gradient norm, every
// micro-step's loss metrics and the loss are computed and reduced over ranks where they live (on a
// GPU under NCCL, with no wait); the step adds them here and reads them all in one transfer, the only
// time per optimizer step that the host waits for the device (the entropy mask's count exchange,
// the seed's design, is the documented exception: docs/gpu.md).
//
//   StepRead read;
//   const int64_t norm_at = read.add(squares);        // float64 values, any shape, any device
//   const std::vector<double> values = read.values(); // one copy from the device
//   const double norm = std::sqrt(values[norm_at]);
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace rayless {

class StepRead {
 public:
  // `values` flattened and widened to float64; returns where they start in values()
  int64_t add(const torch::Tensor& values);
  // Everything added, in order: the parts on a device joined there and copied to the host at once
  // (parts already on the host, as MPI's collectives leave them, are read where they are). Once.
  std::vector<double> values();

  // values() calls so far in this process (tests: one per optimizer step)
  static int64_t reads();

 private:
  std::vector<torch::Tensor> parts_;
  int64_t size_ = 0;
  bool read_ = false;
};

}  // namespace rayless
