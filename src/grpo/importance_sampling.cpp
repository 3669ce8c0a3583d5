#include "rayless/grpo/importance_sampling.h"

#include <cmath>
#include <limits>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"

namespace rayless {

namespace {
bool sequence_level(ImportanceSamplingMode mode) {
  return mode == ImportanceSamplingMode::SequenceTruncate || mode == ImportanceSamplingMode::SequenceMask;
}
bool truncates(ImportanceSamplingMode mode) {
  return mode == ImportanceSamplingMode::TokenTruncate || mode == ImportanceSamplingMode::SequenceTruncate;
}
}  // namespace

ImportanceSamplingSettings importance_sampling_settings_from_config(const Config& config) {
  ImportanceSamplingSettings s;
  s.mode = config.grpo.vllm_importance_sampling_mode;
  s.clip_min.reset();
  s.clip_max.reset();
  if (config.grpo.vllm_importance_sampling_clip_min > 0) s.clip_min = config.grpo.vllm_importance_sampling_clip_min;
  if (config.grpo.vllm_importance_sampling_clip_max > 0) s.clip_max = config.grpo.vllm_importance_sampling_clip_max;
  return s;
}

ImportanceSampling importance_sampling_ratio(const torch::Tensor& old_logps, const torch::Tensor& sampling_logps,
                                             const torch::Tensor& mask, const ImportanceSamplingSettings& s) {
  inputCheck(old_logps.defined() && old_logps.dim() == 2 && sampling_logps.defined() &&
                 sampling_logps.sizes() == old_logps.sizes() && mask.sizes() == old_logps.sizes(),
             "importance sampling: old log-probs, sampling log-probs and mask must all be [N, T]");
  torch::NoGradGuard no_grad;
  const auto dtype = old_logps.scalar_type();
  const torch::Tensor sampling = sampling_logps.to(dtype);
  const torch::Tensor mask_values = mask.to(dtype);
  // a token without a sampling log-prob (NaN) gets a zero difference: ratio 1, no correction
  const torch::Tensor per_token = torch::nan_to_num((old_logps - sampling) * mask_values, 0.0);
  const bool per_sequence = sequence_level(s.mode);
  ImportanceSampling out;
  out.ratio = torch::exp(per_sequence ? per_token.sum(-1, /*keepdim=*/true) : per_token);
  torch::Tensor invalid;
  if (truncates(s.mode)) {
    if (s.clip_min || s.clip_max) out.ratio = torch::clamp(out.ratio, s.clip_min, s.clip_max);
  } else {
    const double low = s.clip_min.value_or(-std::numeric_limits<double>::infinity());
    const double high = s.clip_max.value_or(std::numeric_limits<double>::infinity());
    invalid = (out.ratio < low) | (out.ratio > high);
    out.ratio = out.ratio.masked_fill(invalid, 0.0);
  }

  // TRL's per-process metric values: the sampling/training difference over active tokens, the ratio
  // over active tokens (token modes) or over every sequence (sequence modes); 0 when there is none
  const torch::Tensor active = mask.to(torch::kBool);
  torch::Tensor delta = (old_logps - sampling).abs();
  delta = delta.masked_select(active & ~torch::isnan(delta));
  if (delta.numel() > 0) {
    out.logp_difference_mean = delta.mean().item<double>();
    out.logp_difference_max = delta.max().item<double>();
  }
  const torch::Tensor flat = per_sequence ? out.ratio.flatten() : out.ratio.masked_select(active);
  if (flat.numel() > 0) {
    out.ratio_min = flat.min().item<double>();
    out.ratio_mean = flat.mean().item<double>();
    out.ratio_max = flat.max().item<double>();
  }
  out.considered = flat.numel();
  if (invalid.defined())
    out.masked = (per_sequence ? invalid : invalid.masked_select(active)).sum().item<int64_t>();
  return out;
}

std::map<std::string, double> importance_sampling_metrics(Communicator& comm, const ImportanceSampling& is) {
  // TRL gathers each process's value and takes the mean (sampling/*/mean: nanmean for the ratio), the
  // NaN-ignoring min or the max over processes
  const torch::Tensor mine = torch::tensor({is.logp_difference_mean, is.logp_difference_max, is.ratio_min, is.ratio_mean,
                                            is.ratio_max, static_cast<double>(is.masked), static_cast<double>(is.considered)},
                                           torch::kFloat64);
  const torch::Tensor all = comm.allgather(mine);  // [ranks, 7]
  auto column = [&](int64_t i) { return all.select(1, i); };
  auto kept = [](const torch::Tensor& v) { return v.masked_select(~torch::isnan(v)); };
  auto nan_or = [](const torch::Tensor& v, bool want_min) {
    return v.numel() == 0 ? std::nan("") : (want_min ? v.min() : v.max()).item<double>();
  };
  std::map<std::string, double> m;
  m["sampling/sampling_logp_difference/mean"] = column(0).mean().item<double>();
  m["sampling/sampling_logp_difference/max"] = column(1).max().item<double>();
  m["sampling/importance_sampling_ratio/min"] = nan_or(kept(column(2)), true);
  m["sampling/importance_sampling_ratio/mean"] = kept(column(3)).numel() ? kept(column(3)).mean().item<double>() : std::nan("");
  m["sampling/importance_sampling_ratio/max"] = nan_or(kept(column(4)), false);
  const double considered = column(6).sum().item<double>();
  m["sampling/importance_sampling_ratio/masked_fraction"] = considered > 0 ? column(5).sum().item<double>() / considered : 0.0;
  return m;
}

torch::Tensor off_policy_mask(const torch::Tensor& advantages, const torch::Tensor& per_token_logps,
                              const torch::Tensor& sampling_logps, const torch::Tensor& mask, double threshold) {
  torch::NoGradGuard no_grad;
  const auto dtype = per_token_logps.scalar_type();
  const torch::Tensor values = mask.to(dtype);
  // forward KL estimate log(pi_sampling) - log(pi_theta); a token without a sampling log-prob gives no evidence
  const torch::Tensor kl = torch::nan_to_num(sampling_logps.to(dtype) - per_token_logps.detach(), 0.0);
  const torch::Tensor mean_kl = (kl * values).sum(1, /*keepdim=*/true) / values.sum(1, /*keepdim=*/true).clamp_min(1.0);
  const torch::Tensor keep = (advantages.to(dtype).unsqueeze(1) >= 0) | (mean_kl <= threshold);
  return keep.to(mask.scalar_type());
}

}  // namespace rayless
