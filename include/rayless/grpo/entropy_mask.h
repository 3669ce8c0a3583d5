// High-entropy token mask (TRL's top_entropy_quantile): keep only the active completion tokens whose
// entropy is at least the (1 - top_entropy_quantile) quantile of all active tokens' entropies.
//
// The quantile follows torch.quantile (linear interpolation between order statistics) computed in
// float32, as TRL does, but by selection (std::nth_element) rather than a full sort, so it has no
// size limit. The pieces are exported separately so that the distributed version
// (global_entropy_threshold in rayless/grpo/entropy_threshold.h) can find order statistics across ranks
// and still produce the bit-identical float32 value:
//
//   QuantileRank r = quantile_rank(total_count, q);       // which order statistics, what weight
//   ... find the values at sorted positions r.below and r.above (0-based, ascending) ...
//   float threshold = interpolate_quantile(value_below, value_above, r);
//   torch::Tensor keep = entropy_mask(entropies, completion_mask, threshold);
#pragma once
#include <torch/types.h>

#include <cstdint>

namespace rayless {

// Where the q-quantile of n sorted values lies: between positions `below` and `above` (0-based,
// ascending order; equal when the rank is whole), interpolated with `weight` in [0, 1).
struct QuantileRank {
  int64_t below = 0;
  int64_t above = 0;
  float weight = 0.0f;  // float32, exactly as torch.quantile computes it for a float32 input
};

// n >= 1 values, q in [0, 1]. Mirrors torch.quantile's float32 arithmetic: rank = float(q) * float(n - 1),
// below = trunc(rank), above = ceil(rank), weight = rank - below.
QuantileRank quantile_rank(int64_t n, double q);

// torch.lerp(below_value, above_value, weight) in float32 — bit-identical to torch.quantile's result.
float interpolate_quantile(float below_value, float above_value, const QuantileRank& rank);

// The q-quantile of all elements of `values` (any shape, any floating dtype; taken in float32), by
// selection. Throws InputError when `values` is empty or q is outside [0, 1].
float entropy_quantile(const torch::Tensor& values, double q);

// Boolean [B, T]: completion_mask is set and entropy >= threshold. Compared in the entropies' dtype
// after masking, like TRL (entropies * mask >= threshold) & mask.
torch::Tensor entropy_mask(const torch::Tensor& entropies, const torch::Tensor& completion_mask, float threshold);

// Single-process convenience: threshold over the active tokens with q = 1 - top_entropy_quantile,
// then the mask. No active token -> all false (as TRL).
torch::Tensor high_entropy_mask(const torch::Tensor& entropies, const torch::Tensor& completion_mask,
                                double top_entropy_quantile);

}  // namespace rayless
