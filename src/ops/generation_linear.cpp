// oneDNN's linear through the dispatcher: LibTorch registers the mkldnn:: ops but ships no C++
// declarations for them.
#include "rayless/ops/generation_linear.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "rayless/ops/bfloat16_products.h"
#include "rayless/base/error.h"
#include "ops/cpu/x86/amx/linear_tiles.h"
#include "ops/cpu/x86/avx2/linear_rows.h"

namespace rayless {

namespace {
const std::optional<c10::OperatorHandle>& reorder_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_reorder_linear_weight", ""});
  return op;
}
const std::optional<c10::OperatorHandle>& linear_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  return op;
}

bool bfloat16_supported() {
  static const bool supported = [] {
    const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
    if (!op) return false;
    torch::jit::Stack stack;
    op->callBoxed(&stack);
    return stack.at(0).toBool();
  }();
  return supported;
}

bool packable(const torch::Tensor& weight, torch::ScalarType dtype) {
  const bool dtype_ok = dtype == torch::kFloat32 || (dtype == torch::kBFloat16 && bfloat16_supported());
  return at::hasMKLDNN() && weight.device().is_cpu() && dtype_ok && reorder_op() && linear_op();
}

// cat(parts, 0) in `dtype`, contiguous, or undefined for undefined parts. Each part is cast straight
// into its rows of one buffer: concatenating in the parts' dtype first would write and read one more
// float32 copy of q/k/v and gate/up at every generation under bfloat16 (docs/benchmarks.md, "Levers
// measured after the three runs"). A single contiguous part already in `dtype` is returned as it is.
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
}  // namespace

DecodingLinear::DecodingLinear(const std::vector<torch::Tensor>& weights, const std::vector<torch::Tensor>& biases,
                               torch::ScalarType compute_dtype)
    : weights_(weights), biases_(biases), compute_dtype_(compute_dtype) {
  runtimeCheck(!weights.empty() && weights.size() == biases.size(), "DecodingLinear: one bias slot per weight");
  torch::NoGradGuard no_grad;
  const bool cast = weights.front().scalar_type() != compute_dtype;
  fused_bias_ = fused_in(biases, compute_dtype);
  for (const auto& weight : weights) outputs_ += weight.size(0);
  const int64_t inputs = weights.front().size(1);
  if (compute_dtype == torch::kBFloat16 && weights.front().device().is_cpu() &&
      bfloat16_products() == BFloat16Products::float32) {
    // bfloat16 products widened to float32 (bfloat16_products.h): the weights rounded to bfloat16
    // once and held in float32, packed for oneDNN's float32 kernel where it has one, at every row count
    widened_ = true;
    const torch::Tensor rounded = fused_in(weights, torch::kBFloat16).to(torch::kFloat32);
    if (fused_bias_.defined()) fused_bias_ = fused_bias_.to(torch::kFloat32);
    if (avx2::available()) {
      avx2_weight_ = avx2::pack({rounded});
    } else if (packable(weights.front(), torch::kFloat32)) {
      torch::jit::Stack stack{rounded, c10::IValue()};
      reorder_op()->callBoxed(&stack);
      packed_weight_ = stack.at(0).toTensor();
      packed_min_rows_ = 1;
    } else {
      fused_weight_ = rounded;
    }
  } else if (compute_dtype == torch::kBFloat16 && weights.front().device().is_cpu() && amx::available() &&
      amx::fits(outputs_, inputs)) {
    amx_weight_ = amx::pack(weights);  // cast and laid out in one pass, no fused copy first
  } else if (compute_dtype == torch::kFloat32 && weights.front().device().is_cpu() && !cast && avx2::available()) {
    avx2_weight_ = avx2::pack(weights);  // laid out from the parts in one pass, no fused copy first
  } else if (packable(weights.front(), compute_dtype)) {
    torch::jit::Stack stack{fused_in(weights, compute_dtype), c10::IValue()};
    reorder_op()->callBoxed(&stack);
    packed_weight_ = stack.at(0).toTensor();
    packed_min_rows_ = compute_dtype == torch::kFloat32 ? kPackedMinRowsFloat32 : 1;
  } else if (weights.size() > 1 || cast) {
    fused_weight_ = fused_in(weights, compute_dtype);
  }
}

torch::Tensor DecodingLinear::operator()(const torch::Tensor& x) const {
  const int64_t in = x.size(-1), rows = x.numel() / std::max<int64_t>(in, 1);
  std::optional<c10::impl::ExcludeDispatchKeyGuard> no_autocast;  // widened products are float32 ones,
  if (widened_) no_autocast.emplace(c10::autocast_dispatch_keyset);  // which autocast would lower again
  const bool on_packed =
      amx_weight_.defined() || avx2_weight_.defined() || (packed_weight_.defined() && rows >= packed_min_rows_);
  if (on_packed) {
    // the packed kernels take [rows, in] in the compute dtype and give [rows, outputs]; widened:
    // the input rounded to bfloat16, in float32, and the output rounded once
    auto flat = x.reshape({rows, in}).to(compute_dtype_).contiguous();
    if (widened_) flat = flat.to(torch::kFloat32);
    torch::Tensor y;
    if (amx_weight_.defined()) {
      y = amx::linear(flat, amx_weight_, outputs_, fused_bias_);
    } else if (avx2_weight_.defined()) {
      y = avx2::linear(flat, avx2_weight_, outputs_, fused_bias_);
    } else {
      torch::jit::Stack stack{flat, packed_weight_, fused_bias_.defined() ? c10::IValue(fused_bias_) : c10::IValue(),
                              c10::IValue(std::string("none")), c10::IValue(c10::List<std::optional<at::Scalar>>()),
                              c10::IValue(std::string(""))};
      linear_op()->callBoxed(&stack);
      y = stack.at(0).toTensor();
    }
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

}  // namespace rayless
