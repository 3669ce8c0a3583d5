// The metrics of a step under TRL's names, computed as TRL computes them (its float32 arithmetic
// where it has one, docs/grpo.md) and reduced over ranks: those of a generation, those of a
// micro-step's loss, and their mean over a step.
#pragma once
#include <torch/types.h>

#include <string>
#include <vector>

#include "rayless/trainer/metrics.h"

namespace rayless {

class Communicator;
struct AdvantageOutput;
struct LossOutput;
struct RolloutBatch;

// completions/*, rewards/NAME/mean|std, reward, reward_std, frac_reward_zero_std over all ranks
// (collective). all_rewards_per_func is the gathered [N, K] table. Adds the generation's prompt and
// completion tokens of all ranks to num_tokens.
StepMetrics generation_metrics(Communicator& comm, const RolloutBatch& batch, const torch::Tensor& all_rewards_per_func,
                               const AdvantageOutput& advantages, const std::vector<std::string>& reward_names,
                               int64_t& num_tokens);

// kl, entropy, clip_ratio/*: global over ranks in two allreduces (means from their summed parts,
// extremes NaN-ignoring; minima travel negated so one max-allreduce serves both). Collective.
// sums_finite (when given): whether every summed part is finite on every rank (a NaN count-0 mean is
// "no value"; a NaN or infinite sum is not, and the non-finite guard sees it).
StepMetrics loss_metrics(Communicator& comm, const LossOutput& loss, bool* sums_finite = nullptr);

// The mean of each metric over a step's micro-steps (or generations), NaN left out, as TRL averages
// what it collected between logs.
StepMetrics mean_over(const std::vector<StepMetrics>& metrics);

}  // namespace rayless
