#include "rayless/grpo/advantages.h"

#include <torch/types.h>

#include <cmath>
#include <limits>

#include "rayless/base/error.h"

namespace rayless {

namespace {
constexpr double kStdEpsilon = 1e-4;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

torch::Tensor nanmean_of(const torch::Tensor& values, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return torch::nanmean(values);
  return torch::nanmean(values, {*dim}, keepdim);
}
}  // namespace

torch::Tensor nanstd(const torch::Tensor& values, int64_t dim, bool all) {
  const std::optional<int64_t> d = all ? std::nullopt : std::optional<int64_t>(dim);
  // the same ops in the same order as trl.trainer.utils.nanstd
  auto mean = all ? torch::nanmean(values) : torch::nanmean(values, {dim}, /*keepdim=*/true);
  auto variance = nanmean_of((values - mean).pow(2), d, /*keepdim=*/!all);
  auto count = all ? (~torch::isnan(values)).sum() : (~torch::isnan(values)).sum({dim}, /*keepdim=*/true);
  auto correction = count / (count - 1);  // integer true division: a float32 tensor, as in PyTorch
  correction = torch::where(count > 1, correction, torch::full_like(correction, kNaN));
  variance = variance * correction;
  return torch::sqrt(variance);
}

void check_advantage_settings(const AdvantageSettings& settings) {
  inputCheck(settings.num_generations >= 1, "grpo.num_generations must be >= 1, got ", settings.num_generations);
}

AdvantageOutput compute_advantages(const torch::Tensor& rewards_per_func, const std::vector<double>& reward_weights,
                                   const AdvantageSettings& settings) {
  check_advantage_settings(settings);
  inputCheck(rewards_per_func.dim() == 2, "advantages: rewards_per_func must be [N, K], got shape ",
             rewards_per_func.sizes());
  const int64_t rows = rewards_per_func.size(0);
  const int64_t functions = rewards_per_func.size(1);
  const int64_t G = settings.num_generations;
  inputCheck(functions >= 1, "advantages: rewards_per_func has no reward function column");
  inputCheck(rows % G == 0, "advantages: ", rows, " completions is not a multiple of grpo.num_generations = ", G);
  inputCheck(static_cast<int64_t>(reward_weights.size()) == functions, "advantages: ", reward_weights.size(),
             " reward_weights for ", functions, " reward functions");

  auto table = rewards_per_func.detach().cpu().contiguous();
  if (!table.is_floating_point()) table = table.to(torch::kFloat32);
  const auto dtype = table.scalar_type();
  auto weights = torch::tensor(reward_weights, torch::kFloat64).to(dtype).unsqueeze(0);
  auto unscorable = torch::isnan(table).all(1);
  auto weighted_sum = [&](const torch::Tensor& per_function) {
    return (per_function * weights).nansum(1).masked_fill(unscorable, kNaN);
  };

  AdvantageOutput out;
  torch::Tensor advantages;
  if (settings.multi_objective_aggregation == RewardAggregation::SumThenNormalize) {
    auto rewards = weighted_sum(table);
    auto mean = torch::nanmean(rewards.view({-1, G}), {1}).repeat_interleave(G);
    torch::Tensor std;
    if (settings.scale_rewards == ScaleRewards::Batch)
      std = rows > 1 ? nanstd(rewards).expand_as(rewards) : torch::zeros_like(rewards);
    else
      std = G > 1 ? nanstd(rewards.view({-1, G}), 1, false).squeeze(1).repeat_interleave(G) : torch::zeros_like(rewards);
    advantages = rewards - mean;
    if (settings.scale_rewards != ScaleRewards::None) advantages = advantages / (std + kStdEpsilon);
    out.rewards = rewards;
    out.std_rewards = std;
  } else {
    auto grouped = table.view({-1, G, functions});
    auto mean_k = torch::nanmean(grouped, {1}, /*keepdim=*/true);
    auto std_k = G > 1 ? nanstd(grouped, 1, false) : torch::zeros_like(mean_k);
    auto z = ((grouped - mean_k) / (std_k + kStdEpsilon)).view({-1, functions});
    auto rewards = weighted_sum(z);
    auto std = rows > 1 ? nanstd(rewards).expand_as(rewards) : torch::zeros_like(rewards);
    advantages = (rewards - torch::nanmean(rewards)) / (std + kStdEpsilon);
    out.rewards = weighted_sum(table);
    out.std_rewards = std;
  }
  out.advantages = torch::nan_to_num(advantages, 0.0);
  return out;
}

RewardMetrics reward_metrics(const torch::Tensor& rewards_per_func, const AdvantageOutput& advantages) {
  RewardMetrics m;
  auto table = rewards_per_func.detach().cpu();
  for (int64_t k = 0; k < table.size(1); ++k) {
    auto column = table.select(1, k);
    m.function_mean.push_back(torch::nanmean(column).item<double>());
    m.function_std.push_back(nanstd(column).item<double>());
  }
  m.reward = torch::nanmean(advantages.rewards).item<double>();
  m.reward_std = nanstd(advantages.rewards).item<double>();
  auto zero = torch::isclose(advantages.std_rewards, torch::zeros_like(advantages.std_rewards));
  m.frac_reward_zero_std = zero.to(torch::kFloat32).mean().item<double>();
  return m;
}

}  // namespace rayless
