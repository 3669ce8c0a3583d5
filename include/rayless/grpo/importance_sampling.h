// The correction TRL 1.16 applies to completions that another engine sampled (vLLM there; here the
// generation ranks of asynchronous GRPO, whose policy lags by grpo.async_lag, or a replay file that
// carries the sampler's log-probs): the loss of each token is weighed by the importance ratio
// exp(old - sampling) of the trainer's old log-probs to the sampling log-probs, per token or per
// sequence (summed log-ratios), clipped to [C_min, C_max] (truncate) or zeroed outside it (mask).
// Names and defaults are TRL's (grpo.vllm_importance_sampling_*). docs/grpo.md has the formulas.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "rayless/base/choices.h"
#include "rayless/base/config.h"

namespace rayless {

class Communicator;

struct ImportanceSamplingSettings {
  ImportanceSamplingMode mode = GrpoConfig{}.vllm_importance_sampling_mode;
  std::optional<double> clip_min;                                   // none = TRL's None
  std::optional<double> clip_max = GrpoConfig{}.vllm_importance_sampling_clip_max;
};
// grpo.vllm_importance_sampling_mode and the caps (0 = none)
ImportanceSamplingSettings importance_sampling_settings_from_config(const Config& config);

struct ImportanceSampling {
  torch::Tensor ratio;  // [N, T] (token modes; 1 where the mask is 0) or [N, 1] (sequence modes)
  // this rank's parts of TRL's metrics (its per-process values, 0 when it has no token)
  double logp_difference_mean = 0, logp_difference_max = 0;  // |old - sampling| over active tokens, NaN left out
  double ratio_min = 0, ratio_mean = 0, ratio_max = 0;      // over active tokens, or over sequences
  int64_t masked = 0, considered = 0;                        // ratios zeroed by a *_mask mode, of how many
};

// old_logps, sampling_logps: [N, T] (a NaN sampling log-prob, a token the sampler could not score,
// gets ratio 1, as TRL); mask: [N, T], nonzero = the token counts. The ratio is in old_logps' dtype.
ImportanceSampling importance_sampling_ratio(const torch::Tensor& old_logps, const torch::Tensor& sampling_logps,
                                             const torch::Tensor& mask, const ImportanceSamplingSettings& settings);

// TRL's metrics over all ranks (collective): sampling/sampling_logp_difference/{mean,max} and
// sampling/importance_sampling_ratio/{min,mean,max}, each reduced from the per-rank values as TRL
// gathers them (the mean of the ranks' means), and sampling/importance_sampling_ratio/masked_fraction
// (rayless's: the share of ratios a *_mask mode zeroed, over all ranks).
std::map<std::string, double> importance_sampling_metrics(Communicator& comm, const ImportanceSampling& is);

// DeepSeek-V3.2's off-policy sequence mask as TRL's get_off_policy_mask: a completion is kept when its
// advantage is >= 0 or the masked mean over its tokens of (sampling - current) log-probs is <= threshold.
// advantages [B], per_token_logps and sampling_logps [B, T] (NaN counts 0), mask [B, T] -> [B, 1] in
// the mask's dtype, 1 = keep.
torch::Tensor off_policy_mask(const torch::Tensor& advantages, const torch::Tensor& per_token_logps,
                              const torch::Tensor& sampling_logps, const torch::Tensor& mask, double threshold);

}  // namespace rayless
