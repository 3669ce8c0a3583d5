// GRPO advantages from per-function rewards, as TRL's GRPOTrainer computes them, op for op and in the
// dtype of the input: TRL holds rewards in float32 even in a float64 run, so the trainer passes a
// float32 table and gets TRL's float32 results bit for bit (same LibTorch kernels, same order).
//
// rewards_per_func [N, K]: one column per reward function, NaN where a function gave no score.
// Completions of one prompt are num_generations consecutive rows. The table is the whole generation
// batch of all ranks (the trainer gathers it; it is small), so a group may span ranks.
//
//   sum_then_normalize: r = nansum_k(w_k * R_k)  (NaN when no function scored the row)
//                       A = (r - group_mean(r)) / (std(r) + 1e-4), std = group (group), whole batch
//                       (batch), or no division (none)
//   normalize_then_sum: z_k = (R_k - group_mean_k) / (group_std_k + 1e-4); r = nansum_k(w_k * z_k);
//                       A = (r - batch_mean(r)) / (batch_std(r) + 1e-4)   (scale_rewards is ignored)
// Means and stds ignore NaN; std is Bessel-corrected (NaN with fewer than two values), with TRL's
// nanstd arithmetic (its correction count / (count - 1) is a float32 tensor). Any NaN left in A (an
// unscorable row, a group with no scores) becomes 0.
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "rayless/base/choices.h"

namespace rayless {

struct AdvantageSettings {
  int64_t num_generations = 4;
  ScaleRewards scale_rewards = ScaleRewards::Group;
  RewardAggregation multi_objective_aggregation = RewardAggregation::SumThenNormalize;
};

struct AdvantageOutput {
  torch::Tensor advantages;   // [N]
  torch::Tensor rewards;      // [N]: the weighted reward sum nansum_k(w_k R_k), NaN if unscorable
  torch::Tensor std_rewards;  // [N]: the std each row was scaled by (group or batch)
};

// The reward metrics TRL logs for one generation batch (its float32 arithmetic when the table is
// float32): reward, reward_std (std of the weighted sums over the whole batch), frac_reward_zero_std,
// and rewards/NAME/mean, rewards/NAME/std per function.
struct RewardMetrics {
  double reward = 0, reward_std = 0, frac_reward_zero_std = 0;
  std::vector<double> function_mean, function_std;
};

// Throws InputError for a bad shape, N not divisible by num_generations or a weight count != K.
// Works in the input's floating dtype (weights cast to it).
AdvantageOutput compute_advantages(const torch::Tensor& rewards_per_func, const std::vector<double>& reward_weights,
                                   const AdvantageSettings& settings);
RewardMetrics reward_metrics(const torch::Tensor& rewards_per_func, const AdvantageOutput& advantages);

// TRL's nanstd: NaN-ignoring, Bessel-corrected, of all elements (dim < 0) or along dim (kept).
torch::Tensor nanstd(const torch::Tensor& values, int64_t dim = -1, bool all = true);

void check_advantage_settings(const AdvantageSettings& settings);  // num_generations >= 1

}  // namespace rayless
