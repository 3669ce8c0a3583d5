#include "rayless/trainer/step_metrics.h"

#include <torch/types.h>

#include <cmath>
#include <limits>
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
  // MPI reduces host memory; NCCL (and one rank) the tensors where they are
  const bool on_host = comm.backend_name() == "mpi";
  auto packed = [&](const std::vector<torch::Tensor>& values) {
    const torch::Tensor t = values.empty() ? torch::zeros({0}, torch::kFloat64) : torch::stack(values);
    return on_host ? t.cpu() : t;
  };
  r.sums = packed(parts);
  r.extremes = packed(extremes);
  if (r.sums.numel() > 0) comm.allreduce(r.sums, ReduceOp::Sum);
  if (r.extremes.numel() > 0) comm.allreduce(r.extremes, ReduceOp::Max);
  return r;
}

std::vector<StepMetrics> read_loss_metrics(const std::vector<ReducedLossMetrics>& micro_steps) {
  std::vector<torch::Tensor> pieces;
  for (const ReducedLossMetrics& r : micro_steps)
    for (const torch::Tensor& t : {r.sums, r.extremes})
      if (t.numel() > 0) pieces.push_back(t);  // an empty one may sit on the host
  // joined where they are (every micro-step's on one device), then one copy to the host
  const torch::Tensor all = pieces.empty() ? torch::zeros({0}, torch::kFloat64) : torch::cat(pieces).cpu().contiguous();
  const double* v = all.data_ptr<double>();
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
