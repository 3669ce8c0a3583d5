// GRPO advantages from per-function rewards, as TRL's GRPOTrainer computes them.
//
// rewards_per_func [N, K]: one column per reward function, NaN where a function gave no score.
// Completions of one prompt are num_generations consecutive rows, and whole groups live on one rank,
// so group statistics are local. Batch statistics (scale_rewards = "batch", and every
// normalize_then_sum) span the whole generation batch of all ranks: the caller passes a GlobalSum that
// sums a small float64 vector across ranks (an allreduce); without one the local rows are the batch.
//
//   sum_then_normalize: r = nansum_k(w_k * R_k)  (NaN when no function scored the row)
//                       A = (r - group_mean(r)) / (std(r) + 1e-4), std = group (group), global (batch),
//                       or no division (none)
//   normalize_then_sum: z_k = (R_k - group_mean_k) / (group_std_k + 1e-4); r = nansum_k(w_k * z_k);
//                       A = (r - batch_mean(r)) / (batch_std(r) + 1e-4)   (scale_rewards is ignored)
// Means and stds ignore NaN; std is Bessel-corrected (NaN with fewer than two values). Any NaN left in
// A (an unscorable row, a group with no scores) becomes 0.
#pragma once
#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace rayless {

// Sums a 1-D float64 CPU tensor element-wise across all ranks and returns the result. Every rank must
// call compute_advantages with the same settings, since it calls this the same number of times.
using GlobalSum = std::function<torch::Tensor(const torch::Tensor&)>;

struct AdvantageSettings {
  int64_t num_generations = 4;
  std::string scale_rewards = "group";                        // group | batch | none
  std::string multi_objective_aggregation = "sum_then_normalize";  // or normalize_then_sum
};

struct AdvantageOutput {
  torch::Tensor advantages;   // [N] float64
  torch::Tensor rewards;      // [N] float64: the weighted reward sum nansum_k(w_k R_k), NaN if unscorable
  torch::Tensor std_rewards;  // [N] float64: the std each row was scaled by (group or batch), for metrics
};

// Throws InputError for a bad shape, N not divisible by num_generations, a weight count != K, or an
// unknown scale_rewards / aggregation. The input may be any floating dtype; work is in float64.
AdvantageOutput compute_advantages(const torch::Tensor& rewards_per_func, const std::vector<double>& reward_weights,
                                   const AdvantageSettings& settings, const GlobalSum& global_sum = {});

// Validates names once (config check): InputError naming the key when unknown.
void check_advantage_settings(const AdvantageSettings& settings);

}  // namespace rayless
