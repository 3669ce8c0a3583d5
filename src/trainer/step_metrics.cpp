#include "rayless/trainer/step_metrics.h"

#include <torch/types.h>

#include <cmath>
#include <limits>
#include <map>

#include "rayless/comm/communicator.h"
#include "rayless/trainer/step_read.h"
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

ReducedLossMetrics reduce_loss_metrics(Communicator& comm, const LossOutput& out) {
  ReducedLossMetrics r;
  std::vector<torch::Tensor> parts, extremes;
  for (const auto& [name, part] : out.means) {
    r.means.emplace_back(name, part.single_precision);
    parts.insert(parts.end(), {part.sum, part.count});
  }
  const double none = -std::numeric_limits<double>::infinity();
  for (const auto& [name, value] : out.minima) {
    r.minima.push_back(name);
    extremes.push_back((-value).masked_fill(torch::isnan(value), none));
  }
  for (const auto& [name, value] : out.maxima) {
    r.maxima.push_back(name);
    extremes.push_back(value.masked_fill(torch::isnan(value), none));
  }
  auto packed = [&](const std::vector<torch::Tensor>& values) {
    return values.empty() ? torch::zeros({0}, torch::kFloat64) : comm.in_collective_memory(torch::stack(values));
  };
  r.sums = packed(parts);
  r.extremes = packed(extremes);
  if (r.sums.numel() > 0) comm.allreduce(r.sums, ReduceOp::Sum);
  if (r.extremes.numel() > 0) comm.allreduce(r.extremes, ReduceOp::Max);
  return r;
}

int64_t add_loss_metrics(StepRead& read, const std::vector<ReducedLossMetrics>& micro_steps) {
  int64_t at = -1;
  for (const ReducedLossMetrics& r : micro_steps) {
    const int64_t sums_at = read.add(r.sums);
    read.add(r.extremes);
    if (at < 0) at = sums_at;
  }
  return at;
}

std::vector<StepMetrics> loss_metrics_from(const std::vector<ReducedLossMetrics>& micro_steps, const double* v) {
  std::vector<StepMetrics> out;
  for (const ReducedLossMetrics& r : micro_steps) {
    StepMetrics m;
    for (const auto& [name, single] : r.means) {
      m[name] = mean_value(v[0], v[1], single);
      v += 2;
    }
    for (const std::string& name : r.minima) m[name] = -*v++;
    for (const std::string& name : r.maxima) m[name] = *v++;
    for (auto& [name, value] : m)
      if (std::isinf(value)) value = NAN;  // no rank had a value
    out.push_back(std::move(m));
  }
  return out;
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
