// Projections prepared for generation: those sharing an input (q/k/v, gate/up) become one matmul,
// and on CPUs with oneDNN the weight is packed once into its blocked layout. MKL's sgemm re-packs a
// weight on every call with few rows, which was most of a decode step's matmul time (measured in
// docs/benchmarks.md, "Where the time goes"); a packed weight is read as it lies. Under bfloat16
// autocast (train.bf16) the copy is taken in bfloat16 once per generation, as autocast would cast the
// weight at every call, and oneDNN runs it on the CPU's bfloat16 units (AMX, AVX512-BF16) where present;
// on CPUs with AMX the bfloat16 copy goes to rayless's own tile kernel instead (model/amx_linear.h),
// with which a decode step of the 53M model took 9-30 % less time (docs/benchmarks.md). On CPUs
// with AVX2 but no AVX-512 the float32 copy goes to rayless's AVX2 rows kernel (model/avx2_linear.h),
// at every row count. With
// train.bf16_products = float32 (the default on CPUs without bfloat16 units) the bfloat16 values are
// held and multiplied in float32 instead (bfloat16_products.h).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace rayless {

class DecodingLinear {
 public:
  DecodingLinear() = default;
  // weights [out_i, in] (same in), biases [out_i] or all undefined. The parts are referenced, not
  // copied; the fused (and packed) copy is taken now, in `compute_dtype`, and does not follow later
  // updates. A compute dtype other than the weights' is autocast's: inputs are cast to it, and the
  // output is in it, as autocast's linear gives.
  DecodingLinear(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& biases,
                 torch::ScalarType compute_dtype);
  bool defined() const { return !weights_.empty(); }
  // x [..., in] -> [..., sum out_i]: cat_i(x w_i^T + b_i), equal up to float rounding (summation order)
  torch::Tensor operator()(const torch::Tensor& x) const;

  // In float32, below this many rows the separate parts are faster than the packed weight (oneDNN's
  // small-batch kernel loses to MKL's matrix-vector product there; measured at 1 and 2 rows). A packed
  // bfloat16 weight is faster at every row count (measured from 1 row), so it has no such limit.
  static constexpr int64_t kPackedMinRowsFloat32 = 4;
  torch::ScalarType compute_dtype() const { return compute_dtype_; }
  bool packed() const { return packed_weight_.defined() || amx_weight_.defined() || avx2_weight_.defined(); }
  // the bfloat16 weight is in AMX tiles' layout (model/amx_linear.h) rather than oneDNN's
  bool on_amx_tiles() const { return amx_weight_.defined(); }
  // the float32 weight is in the AVX2 rows kernel's layout (model/avx2_linear.h) rather than oneDNN's
  bool on_avx2_rows() const { return avx2_weight_.defined(); }

 private:
  std::vector<torch::Tensor> weights_, biases_;  // the parts, as given
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  int64_t packed_min_rows_ = 1;
  torch::Tensor fused_weight_;  // cat(weights) in the compute dtype, when not packed and not the parts as given
  torch::Tensor packed_weight_, fused_bias_;  // oneDNN's layout of cat(weights); cat(biases); compute dtype
  torch::Tensor amx_weight_;  // bfloat16 cat(weights) in AMX tiles' layout, where the CPU has them
  torch::Tensor avx2_weight_;  // float32 cat(weights) in the AVX2 kernel's layout, on CPUs without AVX-512
  // bfloat16 products widened to float32 (train.bf16_products, bfloat16_products.h): the packed or
  // fused weight and the bias hold bfloat16 values in float32; inputs are rounded to bfloat16 and
  // widened, outputs rounded once to bfloat16
  bool widened_ = false;
  int64_t outputs_ = 0;       // rows of cat(weights)
};

}  // namespace rayless
