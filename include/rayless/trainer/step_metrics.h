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
class StepRead;

// completions/*, rewards/NAME/mean|std, reward, reward_std, frac_reward_zero_std over all ranks
// (collective). all_rewards_per_func is the gathered [N, K] table. Adds the generation's prompt and
// completion tokens of all ranks to num_tokens.
StepMetrics generation_metrics(Communicator& comm, const RolloutBatch& batch, const torch::Tensor& all_rewards_per_func,
                               const AdvantageOutput& advantages, const std::vector<std::string>& reward_names,
                               int64_t& num_tokens);

// One micro-step's kl, entropy, clip_ratio/*, reduced over ranks and not yet read: float64 tensors on
// the communicator's device (the rank's under NCCL or one rank, the host's under MPI).
struct ReducedLossMetrics {
  std::vector<std::pair<std::string, bool>> means;  // name, single_precision (TRL's float32 value)
  std::vector<std::string> minima, maxima;
  torch::Tensor sums;      // [2 x means]: sum, count of each, summed over ranks
  torch::Tensor extremes;  // [minima + maxima]: -min, then max, the max over ranks (-inf: no rank had one)
};

// Global over ranks in two allreduces (means from their summed parts, extremes NaN-ignoring; minima
// travel negated so one max-allreduce serves both), with no read to the host. Collective.
ReducedLossMetrics reduce_loss_metrics(Communicator& comm, const LossOutput& loss);

// A step's micro-steps' reduced values added to the step's one read to the host (step_read.h), in
// order; returns where they start (-1: no micro-step).
int64_t add_loss_metrics(StepRead& read, const std::vector<ReducedLossMetrics>& micro_steps);
// From those values read (`values` at add_loss_metrics's offset): per micro-step, the global means
// and extremes (NaN where no rank had a value).
std::vector<StepMetrics> loss_metrics_from(const std::vector<ReducedLossMetrics>& micro_steps, const double* values);

// The mean of each metric over a step's micro-steps (or generations), NaN left out, as TRL averages
// what it collected between logs.
StepMetrics mean_over(const std::vector<StepMetrics>& metrics);

}  // namespace rayless
