#include "rayless/grpo/entropy_mask.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "rayless/base/error.h"

namespace rayless {

QuantileRank quantile_rank(int64_t n, double q) {
  inputCheck(n >= 1, "entropy quantile: no values to take a quantile of");
  inputCheck(q >= 0.0 && q <= 1.0, "entropy quantile: q = ", q, " is outside [0, 1]");
  // torch.quantile turns q into a float32 tensor and multiplies it by the last index in float32.
  const float rank = static_cast<float>(q) * static_cast<float>(n - 1);
  QuantileRank result;
  result.below = static_cast<int64_t>(rank);  // trunc, as .toType(kLong)
  result.above = static_cast<int64_t>(std::ceil(rank));
  result.below = std::min(result.below, n - 1);
  result.above = std::min(result.above, n - 1);
  result.weight = rank - static_cast<float>(result.below);
  return result;
}

float interpolate_quantile(float below_value, float above_value, const QuantileRank& rank) {
  // torch's CPU lerp: two formulas chosen by |weight| < 0.5 (accuracy near both ends), each a fused
  // multiply-add in float32 as its vectorised kernel computes it.
  const float weight = rank.weight;
  const float difference = above_value - below_value;
  if (std::abs(weight) < 0.5f) return std::fma(weight, difference, below_value);
  return std::fma(-difference, 1.0f - weight, above_value);
}

float entropy_quantile(const torch::Tensor& values, double q) {
  const int64_t n = values.numel();
  inputCheck(n >= 1, "entropy quantile: no values to take a quantile of");
  auto flat = values.detach().to(torch::kCPU, torch::kFloat32).contiguous().view({-1});
  std::vector<float> data(flat.data_ptr<float>(), flat.data_ptr<float>() + n);
  for (float v : data)
    if (std::isnan(v)) return std::numeric_limits<float>::quiet_NaN();  // torch.quantile: NaN in, NaN out
  const QuantileRank rank = quantile_rank(n, q);
  std::nth_element(data.begin(), data.begin() + rank.below, data.end());
  const float below_value = data[rank.below];
  float above_value = below_value;
  if (rank.above != rank.below)  // the next order statistic is the smallest of the upper part
    above_value = *std::min_element(data.begin() + rank.below + 1, data.end());
  return interpolate_quantile(below_value, above_value, rank);
}

torch::Tensor entropy_mask(const torch::Tensor& entropies, const torch::Tensor& completion_mask, float threshold) {
  inputCheck(entropies.sizes() == completion_mask.sizes(), "entropy mask: entropies have shape ", entropies.sizes(),
             " but completion_mask has shape ", completion_mask.sizes());
  const auto active = completion_mask.to(torch::kBool);
  auto masked = entropies.detach() * active.to(entropies.scalar_type());
  // a 0-dim float32 tensor, so type promotion matches TRL's comparison with the quantile tensor
  auto threshold_tensor = torch::scalar_tensor(threshold, torch::TensorOptions().dtype(torch::kFloat32).device(entropies.device()));
  return masked.ge(threshold_tensor).logical_and(active);
}

torch::Tensor high_entropy_mask(const torch::Tensor& entropies, const torch::Tensor& completion_mask,
                                double top_entropy_quantile) {
  inputCheck(entropies.sizes() == completion_mask.sizes(), "entropy mask: entropies have shape ", entropies.sizes(),
             " but completion_mask has shape ", completion_mask.sizes());
  const auto active = completion_mask.to(torch::kBool);
  auto values = entropies.detach().masked_select(active);
  if (values.numel() == 0) return torch::zeros_like(active);
  const float threshold = entropy_quantile(values, 1.0 - top_entropy_quantile);
  return entropy_mask(entropies, completion_mask, threshold);
}

}  // namespace rayless
