// The GRPO policy loss of one micro-batch and its metrics, number for number as TRL's
// GRPOTrainer._compute_loss (see docs/grpo.md for the formulas and each loss type's normalisation).
//
//   LossSettings settings = loss_settings_from_config(config, num_processes);
//   LossInputs in{logps, old_logps, ref_logps, advantages, completion_mask, entropies, entropy_mask};
//   in.num_items_in_batch = global active tokens of the whole generation batch (dapo, cispo);
//   LossOutput out = compute_loss(in, settings);
//   out.loss.backward();
//
// Metrics come back as parts (sums and counts, minima and maxima of this rank), as scalars on the
// loss's device so that nothing is read to the host per micro-step: the trainer reduces them across
// ranks and reads a whole step's at once; LossOutput::metrics() reads the single-process values
// under TRL's names:
// kl, entropy, clip_ratio/low_mean, clip_ratio/high_mean, clip_ratio/region_mean, clip_ratio/low_min,
// clip_ratio/high_max (and cispo_clip_ratio for cispo); with the off-policy mask also rayless's
// sampling/off_policy_masked_fraction (the share of completions it dropped).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "rayless/base/choices.h"
#include "rayless/base/config.h"

namespace rayless {

// Defaults come from the config's own ([grpo] section), so a default lives in one place.
struct LossSettings {
  LossType loss_type = GrpoConfig{}.loss_type;
  ImportanceSamplingLevel importance_sampling_level = GrpoConfig{}.importance_sampling_level;  // or Sequence (GSPO)
  double epsilon_low = GrpoConfig{}.epsilon;                         // ratio clipped below at 1 - epsilon_low
  double epsilon_high = GrpoConfig{}.epsilon;                        // above at 1 + epsilon_high; cispo: ratio capped at epsilon_high
  std::optional<double> delta;                      // upper cap on the unclipped ratio (two-sided clipping)
  double beta = 0.0;                                // k3 KL coefficient; needs ref_per_token_logps when != 0
  bool use_bias_correction_kl = GrpoConfig{}.use_bias_correction_kl;  // KL times the importance ratio
  int64_t max_completion_length = 0;                // dr_grpo's normaliser
  int64_t gradient_accumulation_steps = 1;          // grpo/bnpo/dr_grpo/sapo/luspo divide by it
  int64_t steps_per_generation = 0;                 // dapo/cispo: x accumulation / steps_per_generation; 0 = accumulation
  int64_t num_processes = 1;                        // dapo/cispo: num_items_in_batch / num_processes
  double sapo_temperature_pos = GrpoConfig{}.sapo_temperature_pos;
  double sapo_temperature_neg = GrpoConfig{}.sapo_temperature_neg;
  std::optional<double> off_policy_mask_threshold;  // DeepSeek-V3.2's off-policy sequence mask (TRL's None = off)
};

// From the [grpo]/[generation]/[train] keys; num_processes = world size.
LossSettings loss_settings_from_config(const Config& config, int64_t num_processes);
// InputError naming the key when a value is out of range.
void check_loss_settings(const LossSettings& settings);

struct LossInputs {
  torch::Tensor per_token_logps;      // [B, T], requires grad
  torch::Tensor old_per_token_logps;  // [B, T] or undefined (then per_token_logps.detach(): on-policy)
  torch::Tensor ref_per_token_logps;  // [B, T]; required when beta != 0
  torch::Tensor advantages;           // [B]
  torch::Tensor completion_mask;      // [B, T], nonzero = active token
  torch::Tensor entropies;            // [B, T] or undefined (then no "entropy" metric)
  torch::Tensor entropy_mask;         // [B, T] bool or undefined (top_entropy_quantile = 1)
  // completions sampled by another engine (importance_sampling.h): their sampling log-probs [B, T] (the
  // off-policy mask measures against them, else against the old log-probs) and the importance ratio
  // [B, T] or [B, 1] that weighs each token's loss (undefined = no correction)
  torch::Tensor sampling_per_token_logps;
  torch::Tensor importance_sampling_ratio;
  double num_items_in_batch = 0;      // dapo/cispo: global active completion tokens of the generation batch
};

// A mean metric as its parts, float64 scalars on the loss's device: global value = sum over ranks of
// sum / max(sum over ranks of count, 1).
struct MeanPart {
  torch::Tensor sum;
  torch::Tensor count;
  bool single_precision = false;  // TRL's value is float32 (an indicator's mean): round the global mean
};
// The mean from (reduced) parts read to the host, rounded to float32 where TRL's value is.
double mean_value(double sum, double count, bool single_precision);

struct LossOutput {
  torch::Tensor loss;  // scalar, differentiable w.r.t. per_token_logps
  std::map<std::string, MeanPart> means;  // kl, entropy, clip_ratio/{low,high,region}_mean, cispo_clip_ratio
  // clip_ratio/low_min and clip_ratio/high_max: min / max over completions with active tokens of the
  // per-completion clipped fraction, float64 scalars on the device; NaN when this rank has none
  // (reduce with a NaN-ignoring min/max)
  std::map<std::string, torch::Tensor> minima;
  std::map<std::string, torch::Tensor> maxima;
  std::map<std::string, double> metrics() const;  // single-process values (read to the host)
};

LossOutput compute_loss(const LossInputs& inputs, const LossSettings& settings);

}  // namespace rayless
