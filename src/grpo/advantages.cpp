#include "rayless/grpo/advantages.h"

#include <cmath>
#include <limits>

#include "rayless/error.h"

namespace rayless {

namespace {

constexpr double kStdEpsilon = 1e-4;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// NaN-ignoring mean and Bessel-corrected std along dim 1 of [G, n] (one row per group), as TRL's
// torch.nanmean / trl.nanstd: std is NaN with fewer than two values.
std::pair<torch::Tensor, torch::Tensor> group_mean_std(const torch::Tensor& grouped) {
  auto valid = ~torch::isnan(grouped);
  auto count = valid.sum(1, /*keepdim=*/true).to(torch::kFloat64);
  auto zeroed = torch::where(valid, grouped, torch::zeros_like(grouped));
  auto mean = zeroed.sum(1, true) / count;  // 0/0 = NaN for a group with no scores
  auto deviation = torch::where(valid, grouped - mean, torch::zeros_like(grouped));
  auto variance = (deviation * deviation).sum(1, true) / (count - 1);
  variance = torch::where(count > 1, variance, torch::full_like(variance, kNaN));
  return {mean, torch::sqrt(variance)};
}

// NaN-ignoring mean and Bessel-corrected std of all values of all ranks (two global sums).
std::pair<double, double> batch_mean_std(const torch::Tensor& values, const GlobalSum& global_sum) {
  auto sum_up = [&](torch::Tensor local) { return global_sum ? global_sum(local) : local; };
  auto valid = ~torch::isnan(values);
  auto zeroed = torch::where(valid, values, torch::zeros_like(values));
  auto totals = sum_up(torch::stack({zeroed.sum(), valid.sum().to(torch::kFloat64)}));
  const double count = totals[1].item<double>();
  const double mean = totals[0].item<double>() / count;
  auto deviation = torch::where(valid, values - mean, torch::zeros_like(values));
  auto squares = sum_up((deviation * deviation).sum().reshape({1}));
  const double std = count > 1 ? std::sqrt(squares[0].item<double>() / (count - 1)) : kNaN;
  return {mean, std};
}

// Global row count: TRL uses a zero std for a batch of a single completion.
int64_t global_rows(int64_t local_rows, const GlobalSum& global_sum) {
  auto local = torch::full({1}, static_cast<double>(local_rows), torch::kFloat64);
  return static_cast<int64_t>(std::llround((global_sum ? global_sum(local) : local)[0].item<double>()));
}

}  // namespace

void check_advantage_settings(const AdvantageSettings& settings) {
  inputCheck(settings.num_generations >= 1, "grpo.num_generations must be >= 1, got ", settings.num_generations);
  inputCheck(settings.scale_rewards == "group" || settings.scale_rewards == "batch" || settings.scale_rewards == "none",
             "grpo.scale_rewards: unknown value \"", settings.scale_rewards, "\" (group | batch | none)");
  inputCheck(settings.multi_objective_aggregation == "sum_then_normalize" ||
                 settings.multi_objective_aggregation == "normalize_then_sum",
             "grpo.multi_objective_aggregation: unknown value \"", settings.multi_objective_aggregation,
             "\" (sum_then_normalize | normalize_then_sum)");
}

AdvantageOutput compute_advantages(const torch::Tensor& rewards_per_func, const std::vector<double>& reward_weights,
                                   const AdvantageSettings& settings, const GlobalSum& global_sum) {
  check_advantage_settings(settings);
  inputCheck(rewards_per_func.dim() == 2, "advantages: rewards_per_func must be [N, K], got shape ",
             rewards_per_func.sizes());
  const int64_t rows = rewards_per_func.size(0);
  const int64_t functions = rewards_per_func.size(1);
  const int64_t generations = settings.num_generations;
  inputCheck(functions >= 1, "advantages: rewards_per_func has no reward function column");
  inputCheck(rows % generations == 0, "advantages: ", rows, " completions is not a multiple of grpo.num_generations = ",
             generations);
  inputCheck(static_cast<int64_t>(reward_weights.size()) == functions, "advantages: ", reward_weights.size(),
             " reward_weights for ", functions, " reward functions");

  auto rewards_k = rewards_per_func.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  auto weights = torch::tensor(reward_weights, torch::kFloat64).unsqueeze(0);
  auto unscorable = torch::isnan(rewards_k).all(1);
  auto weighted_nansum = [&](const torch::Tensor& per_function) {
    auto sum = torch::nansum(per_function * weights, 1);
    return sum.masked_fill(unscorable, kNaN);
  };

  AdvantageOutput out;
  torch::Tensor advantages;
  if (settings.multi_objective_aggregation == "sum_then_normalize") {
    auto rewards = weighted_nansum(rewards_k);
    auto [group_mean, group_std] = group_mean_std(rewards.view({-1, generations}));
    auto mean = group_mean.repeat_interleave(generations);
    torch::Tensor std;
    if (settings.scale_rewards == "batch") {
      if (global_rows(rows, global_sum) > 1)
        std = torch::full({rows}, batch_mean_std(rewards, global_sum).second, torch::kFloat64);
      else
        std = torch::zeros({rows}, torch::kFloat64);
    } else {
      std = generations > 1 ? group_std.repeat_interleave(generations) : torch::zeros({rows}, torch::kFloat64);
    }
    advantages = rewards - mean;
    if (settings.scale_rewards != "none") advantages = advantages / (std + kStdEpsilon);
    out.rewards = rewards;
    out.std_rewards = std;
  } else {
    // per function: z-score inside each group, over [groups, G, K]
    auto grouped = rewards_k.view({-1, generations, functions});
    auto transposed = grouped.transpose(1, 2).reshape({-1, generations});  // [(groups*K), G]
    auto [mean_k, std_k] = group_mean_std(transposed);
    if (generations == 1) std_k = torch::zeros_like(mean_k);
    auto z = ((transposed - mean_k) / (std_k + kStdEpsilon)).view({-1, functions, generations}).transpose(1, 2);
    auto rewards = weighted_nansum(z.reshape({rows, functions}));
    double mean = 0, std = 0;
    std::tie(mean, std) = batch_mean_std(rewards, global_sum);
    if (global_rows(rows, global_sum) <= 1) std = 0;
    advantages = (rewards - mean) / (std + kStdEpsilon);
    out.rewards = weighted_nansum(rewards_k);
    out.std_rewards = torch::full({rows}, std, torch::kFloat64);
  }
  out.advantages = torch::nan_to_num(advantages, 0.0);
  return out;
}

}  // namespace rayless
