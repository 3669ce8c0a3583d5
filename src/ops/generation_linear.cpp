// Generation's projections (GenerationLinear): the layout is chosen once, at construction, by the
// weights' backend (the one dispatch point: its pack_generation_weight entry), and every product then
// runs on that layout's kernel; where the backend packs nothing, the fused weight (or the parts) and
// LibTorch's linear. See ops.h.
#include "backend.h"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>

#include "rayless/base/error.h"

namespace rayless::ops {

// Each part is cast straight into its rows of one buffer: concatenating in the parts' dtype first would
// write and read one more float32 copy of q/k/v and gate/up at every generation under bfloat16.
torch::Tensor fused_in(const std::vector<torch::Tensor>& parts, torch::ScalarType dtype) {
  if (parts.empty() || !parts.front().defined()) return {};
  if (parts.size() == 1) return parts.front().to(dtype).contiguous();
  int64_t rows = 0;
  for (const auto& part : parts) rows += part.size(0);
  auto sizes = parts.front().sizes().vec();
  sizes.front() = rows;
  auto fused = torch::empty(sizes, parts.front().options().dtype(dtype));
  int64_t first = 0;
  for (const auto& part : parts) {
    fused.narrow(0, first, part.size(0)).copy_(part);
    first += part.size(0);
  }
  return fused;
}

GenerationLinear::GenerationLinear(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& biases,
                                   torch::ScalarType compute_dtype)
    : weights_(weights), biases_(biases), compute_dtype_(compute_dtype) {
  runtimeCheck(!weights.empty() && weights.size() == biases.size(), "GenerationLinear: one bias slot per weight");
  torch::NoGradGuard no_grad;
  const BackendTable& backend = backend_for(weights.front().device());
  const bool cast = weights.front().scalar_type() != compute_dtype;
  fused_bias_ = fused_in(biases, compute_dtype);
  for (const auto& weight : weights) outputs_ += weight.size(0);
  if (compute_dtype == torch::kBFloat16 && bfloat16_products() == BFloat16Products::float32 &&
      backend.widens_bfloat16_products) {
    // bfloat16 products widened to float32 (train.bf16_products): the weights rounded to bfloat16
    // once and held in float32, packed for the backend's float32 kernel where it has one
    widened_ = true;
    const torch::Tensor rounded = fused_in(weights, torch::kBFloat16).to(torch::kFloat32);
    if (fused_bias_.defined()) fused_bias_ = fused_bias_.to(torch::kFloat32);
    if (!backend.pack_generation_weight || !backend.pack_generation_weight({rounded}, torch::kFloat32, true, &packed_))
      fused_weight_ = rounded;
    return;
  }
  if (backend.pack_generation_weight && backend.pack_generation_weight(weights, compute_dtype, false, &packed_)) return;
  if (weights.size() > 1 || cast) fused_weight_ = fused_in(weights, compute_dtype);
}

const char* GenerationLinear::kernel() const { return packed() ? KernelPlan::name(packed_.kernel) : "LibTorch"; }

torch::Tensor GenerationLinear::operator()(const torch::Tensor& x) const {
  const int64_t in = x.size(-1), rows = x.numel() / std::max<int64_t>(in, 1);
  std::optional<c10::impl::ExcludeDispatchKeyGuard> no_autocast;  // widened products are float32 ones,
  if (widened_) no_autocast.emplace(c10::autocast_dispatch_keyset);  // which autocast would lower again
  if (packed_.data.defined() && rows >= packed_.min_rows) {
    // the packed kernels take [rows, in] in the compute dtype and give [rows, outputs]; widened:
    // the input rounded to bfloat16, in float32, and the output rounded once
    auto flat = x.reshape({rows, in}).to(compute_dtype_).contiguous();
    if (widened_) flat = flat.to(torch::kFloat32);
    const torch::Tensor y = backend_for(packed_.data.device()).packed_linear(packed_, flat, outputs_, fused_bias_);
    auto sizes = x.sizes().vec();
    sizes.back() = outputs_;
    return (widened_ ? y.to(compute_dtype_) : y).view(sizes);
  }
  if (widened_)
    return torch::linear(x.to(compute_dtype_).to(torch::kFloat32), fused_weight_, fused_bias_).to(compute_dtype_);
  if (fused_weight_.defined()) return torch::linear(x.to(compute_dtype_), fused_weight_, fused_bias_);
  if (weights_.size() == 1) return torch::linear(x, weights_.front(), biases_.front());
  std::vector<torch::Tensor> outputs;
  for (size_t i = 0; i < weights_.size(); ++i) outputs.push_back(torch::linear(x, weights_[i], biases_[i]));
  return torch::cat(outputs, -1);
}

}  // namespace rayless::ops
