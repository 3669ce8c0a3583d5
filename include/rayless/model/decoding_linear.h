// Projections prepared for generation: those sharing an input (q/k/v, gate/up) become one matmul,
// and on CPUs with oneDNN the weight is packed once into its blocked layout. MKL's sgemm re-packs a
// weight on every call with few rows, which was most of a decode step's matmul time (measured in
// docs/benchmarks.md, "Where the time goes"); a packed weight is read as it lies.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace rayless {

class DecodingLinear {
 public:
  DecodingLinear() = default;
  // weights [out_i, in] (same in), biases [out_i] or all undefined. The parts are referenced, not
  // copied; the fused (and packed) copy is taken now and does not follow later updates.
  DecodingLinear(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& biases);
  bool defined() const { return !weights_.empty(); }
  // x [..., in] -> [..., sum out_i]: cat_i(x w_i^T + b_i), equal up to float rounding (summation order)
  torch::Tensor operator()(const torch::Tensor& x) const;

  // Below this many rows the separate parts are faster than the packed weight (oneDNN's small-batch
  // kernel loses to MKL's matrix-vector product there; measured at 1 and 2 rows).
  static constexpr int64_t kPackedMinRows = 4;

 private:
  std::vector<torch::Tensor> weights_, biases_;  // the parts, as given
  torch::Tensor fused_weight_;                   // cat(weights) when not packed and there are several parts
  torch::Tensor packed_weight_, fused_bias_;     // oneDNN's layout of cat(weights); cat(biases)
};

}  // namespace rayless
