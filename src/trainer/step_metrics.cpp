#include "rayless/trainer/step_metrics.h"

#include <torch/types.h>

#include <cmath>
#include <map>

#include "rayless/comm/communicator.h"
#include "rayless/grpo/advantages.h"
#include "rayless/grpo/loss.h"
#include "rayless/rollout/rollout_batch.h"

namespace rayless {

StepMetrics generation_metrics(Communicator& comm, const RolloutBatch& batch, const torch::Tensor& all_rewards_per_func,
                               const AdvantageOutput& advantages, const std::vector<std::string>& reward_names,
                               int64_t& num_tokens) {
  // the model's tokens only, when tools wrote some (TRL counts tool_mask)
  const torch::Tensor lengths = torch::cat(comm.allgather_variable(batch.model_lengths()), 0).to(torch::kFloat32);
  const torch::Tensor truncated = torch::cat(comm.allgather_variable(batch.truncated), 0);
  int64_t prompt_tokens = 0;
  for (const auto& p : batch.prompt_ids) prompt_tokens += static_cast<int64_t>(p.size());
  num_tokens += global_sum(comm, prompt_tokens) + static_cast<int64_t>(lengths.sum().item<double>());
  StepMetrics m;
  m["completions/mean_length"] = lengths.mean().item<double>();
  m["completions/min_length"] = lengths.min().item<double>();
  m["completions/max_length"] = lengths.max().item<double>();
  m["completions/clipped_ratio"] = truncated.to(torch::kFloat32).mean().item<double>();
  torch::Tensor terminated = lengths.masked_select(~truncated);
  if (terminated.numel() == 0) terminated = torch::zeros({1}, torch::kFloat32);  // TRL's edge case
  m["completions/mean_terminated_length"] = terminated.mean().item<double>();
  m["completions/min_terminated_length"] = terminated.min().item<double>();
  m["completions/max_terminated_length"] = terminated.max().item<double>();
  m["completions/total_tokens"] = lengths.sum().item<double>();
  const RewardMetrics r = reward_metrics(all_rewards_per_func, advantages);
  for (size_t k = 0; k < reward_names.size(); ++k) {
    m["rewards/" + reward_names[k] + "/mean"] = r.function_mean[k];
    m["rewards/" + reward_names[k] + "/std"] = r.function_std[k];
  }
  m["reward"] = r.reward;
  m["reward_std"] = r.reward_std;
  m["frac_reward_zero_std"] = r.frac_reward_zero_std;
  return m;
}

StepMetrics loss_metrics(Communicator& comm, const LossOutput& out, bool* sums_finite) {
  std::vector<double> parts, extremes;
  for (const auto& [name, part] : out.means) parts.insert(parts.end(), {part.sum, part.count});
  for (const auto& [name, value] : out.minima) extremes.push_back(std::isnan(value) ? -INFINITY : -value);
  for (const auto& [name, value] : out.maxima) extremes.push_back(std::isnan(value) ? -INFINITY : value);
  torch::Tensor summed = torch::tensor(parts, torch::kFloat64);
  torch::Tensor maxed = torch::tensor(extremes, torch::kFloat64);
  if (summed.numel() > 0) comm.allreduce(summed, ReduceOp::Sum);
  if (sums_finite) *sums_finite = summed.numel() == 0 || torch::isfinite(summed).all().item<bool>();
  if (maxed.numel() > 0) comm.allreduce(maxed, ReduceOp::Max);
  StepMetrics m;
  int64_t i = 0;
  for (const auto& [name, part] : out.means) {
    m[name] = MeanPart{summed[2 * i].item<double>(), summed[2 * i + 1].item<double>(), part.single_precision}.value();
    ++i;
  }
  i = 0;
  for (const auto& [name, value] : out.minima) m[name] = -maxed[i++].item<double>();
  for (const auto& [name, value] : out.maxima) m[name] = maxed[i++].item<double>();
  for (auto& [name, value] : m)
    if (std::isinf(value)) value = NAN;  // no rank had a value
  return m;
}

StepMetrics mean_over(const std::vector<StepMetrics>& metrics) {
  StepMetrics sums;
  std::map<std::string, int64_t> counts;
  for (const StepMetrics& one : metrics) {
    for (const auto& [name, value] : one) {
      if (std::isnan(value)) continue;
      sums[name] += value;
      counts[name] += 1;
    }
  }
  for (auto& [name, value] : sums) value /= static_cast<double>(counts[name]);
  return sums;
}

}  // namespace rayless
