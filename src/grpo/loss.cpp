#include "rayless/grpo/loss.h"

#include <cmath>
#include <limits>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/grpo/importance_sampling.h"

namespace rayless {

namespace {

bool is_clipped_family(LossType loss_type) {
  return loss_type == LossType::Grpo || loss_type == LossType::Bnpo || loss_type == LossType::DrGrpo ||
         loss_type == LossType::Dapo || loss_type == LossType::Luspo;
}

void check_same_shape(const torch::Tensor& tensor, const torch::Tensor& like, const char* name) {
  inputCheck(tensor.sizes() == like.sizes(), "loss: ", name, " has shape ", tensor.sizes(), " but per_token_logps has ",
             like.sizes());
}

// kl, entropy and the clip metrics as parts the trainer reduces over ranks. TRL's metric dtype is
// that of x times the completion mask, with a float32 count: float32 for the indicator metrics
// (x.float()) and for float32 log-probs, float64 for float64 kl and entropy.
void add_loss_metrics(LossOutput& out, const LossInputs& in, const LossSettings& s, const torch::Tensor& mask,
                      const torch::Tensor& coef_1, const torch::Tensor& advantages, const torch::Tensor& per_token_kl) {
  torch::NoGradGuard no_grad;
  const auto mask32 = in.completion_mask.to(torch::kFloat32);
  // sums in the metric's dtype, widened exactly to float64, left on the device
  auto mean_part = [&](const torch::Tensor& x) {
    const bool single = x.scalar_type() == torch::kFloat32;
    if (x.size(1) == 1)
      return MeanPart{x.sum().to(torch::kFloat64),
                      torch::full({}, static_cast<double>(x.size(0)), x.options().dtype(torch::kFloat64)), single};
    const auto& m = single ? mask32 : mask;
    return MeanPart{(x * m).sum().to(torch::kFloat64), m.sum().to(torch::kFloat64), single};
  };
  // per completion: the already-per-sequence value, or the masked mean (NaN for an empty row)
  auto per_sequence = [&](const torch::Tensor& x) {
    if (x.size(1) == 1) return x.squeeze(1);
    const auto& m = x.scalar_type() == torch::kFloat32 ? mask32 : mask;
    return (x * m).sum(-1) / m.sum(-1);
  };
  // min / max of the non-NaN values, NaN when there is none; on the device (the values are fractions,
  // so an infinity marks "none")
  auto nan_extreme = [](const torch::Tensor& values, bool want_min) {
    const auto options = values.options().dtype(torch::kFloat64);
    if (values.numel() == 0) return torch::full({}, std::numeric_limits<double>::quiet_NaN(), options);
    const double none = want_min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
    const auto filled = values.to(torch::kFloat64).masked_fill(torch::isnan(values), none);
    const auto extreme = want_min ? filled.min() : filled.max();
    return extreme.masked_fill(extreme == none, std::numeric_limits<double>::quiet_NaN());
  };
  if (s.beta != 0.0) out.means["kl"] = mean_part(per_token_kl.detach());
  if (in.entropies.defined()) out.means["entropy"] = mean_part(in.entropies.detach().to(mask.scalar_type()));
  if (is_clipped_family(s.loss_type)) {
    auto low = ((coef_1 < 1 - s.epsilon_low) & (advantages < 0)).to(torch::kFloat32);
    auto high = ((coef_1 > 1 + s.epsilon_high) & (advantages > 0)).to(torch::kFloat32);
    auto region = ((low + high) > 0).to(torch::kFloat32);
    out.means["clip_ratio/low_mean"] = mean_part(low);
    out.means["clip_ratio/high_mean"] = mean_part(high);
    out.means["clip_ratio/region_mean"] = mean_part(region);
    out.minima["clip_ratio/low_min"] = nan_extreme(per_sequence(low), true);
    out.maxima["clip_ratio/high_max"] = nan_extreme(per_sequence(high), false);
  } else if (s.loss_type == LossType::Cispo) {
    out.means["cispo_clip_ratio"] = mean_part(((coef_1 > s.epsilon_high) & (advantages > 0)).to(torch::kFloat32));
  }
}

}  // namespace

void check_loss_settings(const LossSettings& s) {
  inputCheck(s.gradient_accumulation_steps >= 1, "train.gradient_accumulation_steps must be >= 1");
  inputCheck(s.num_processes >= 1, "loss: num_processes must be >= 1");
  inputCheck(s.loss_type != LossType::DrGrpo || s.max_completion_length >= 1,
             "generation.max_completion_length must be >= 1 for loss_type dr_grpo");
}

LossSettings loss_settings_from_config(const Config& config, int64_t num_processes) {
  LossSettings s;
  s.loss_type = config.grpo.loss_type;
  s.importance_sampling_level = config.grpo.importance_sampling_level;
  s.epsilon_low = config.grpo.epsilon;
  s.epsilon_high = config.effective_epsilon_high();
  if (config.grpo.delta > 0) s.delta = config.grpo.delta;
  s.beta = config.grpo.beta;
  s.use_bias_correction_kl = config.grpo.use_bias_correction_kl;
  s.max_completion_length = config.generation.max_completion_length;
  s.gradient_accumulation_steps = config.train.gradient_accumulation_steps;
  s.steps_per_generation = config.effective_steps_per_generation(num_processes);
  s.num_processes = num_processes;
  s.sapo_temperature_pos = config.grpo.sapo_temperature_pos;
  s.sapo_temperature_neg = config.grpo.sapo_temperature_neg;
  if (config.grpo.off_policy_mask_threshold > 0) s.off_policy_mask_threshold = config.grpo.off_policy_mask_threshold;
  check_loss_settings(s);
  return s;
}

double mean_value(double sum, double count, bool single_precision) {
  const double mean = sum / (count < 1 ? 1 : count);
  return single_precision ? static_cast<double>(static_cast<float>(mean)) : mean;
}

std::map<std::string, double> LossOutput::metrics() const {
  std::map<std::string, double> out;
  for (const auto& [name, part] : means)
    out[name] = mean_value(part.sum.item<double>(), part.count.item<double>(), part.single_precision);
  for (const auto& [name, value] : minima) out[name] = value.item<double>();
  for (const auto& [name, value] : maxima) out[name] = value.item<double>();
  return out;
}

LossOutput compute_loss(const LossInputs& in, const LossSettings& s) {
  check_loss_settings(s);
  const auto& logps = in.per_token_logps;
  inputCheck(logps.defined() && logps.dim() == 2, "loss: per_token_logps must be [B, T]");
  inputCheck(logps.is_floating_point(), "loss: per_token_logps must be floating point");
  const int64_t batch = logps.size(0);
  inputCheck(in.completion_mask.defined(), "loss: completion_mask is missing");
  check_same_shape(in.completion_mask, logps, "completion_mask");
  if (in.old_per_token_logps.defined()) check_same_shape(in.old_per_token_logps, logps, "old_per_token_logps");
  if (in.entropies.defined()) check_same_shape(in.entropies, logps, "entropies");
  if (in.entropy_mask.defined()) check_same_shape(in.entropy_mask, logps, "entropy_mask");
  if (in.sampling_per_token_logps.defined()) check_same_shape(in.sampling_per_token_logps, logps, "sampling_per_token_logps");
  if (in.importance_sampling_ratio.defined())
    inputCheck(in.importance_sampling_ratio.dim() == 2 && in.importance_sampling_ratio.size(0) == batch &&
                   (in.importance_sampling_ratio.size(1) == 1 || in.importance_sampling_ratio.size(1) == logps.size(1)),
               "loss: importance_sampling_ratio must be [B, T] or [B, 1], got ", in.importance_sampling_ratio.sizes());
  inputCheck(in.advantages.defined() && in.advantages.dim() == 1 && in.advantages.size(0) == batch,
             "loss: advantages must be [", batch, "], got shape ",
             in.advantages.defined() ? in.advantages.sizes() : torch::IntArrayRef{});
  if (s.beta != 0.0) {
    inputCheck(in.ref_per_token_logps.defined(), "loss: beta = ", s.beta, " needs ref_per_token_logps");
    check_same_shape(in.ref_per_token_logps, logps, "ref_per_token_logps");
  }

  const auto dtype = logps.scalar_type();
  auto mask = in.completion_mask.to(dtype);
  auto advantages = in.advantages.to(dtype).unsqueeze(1);  // [B, 1]
  auto old_logps = in.old_per_token_logps.defined() ? in.old_per_token_logps.to(dtype) : logps.detach();

  // the off-policy sequence mask looks at the sampling log-probs where another engine gave them (TRL)
  torch::Tensor keep;
  if (s.off_policy_mask_threshold)
    keep = off_policy_mask(in.advantages, logps,
                           in.sampling_per_token_logps.defined() ? in.sampling_per_token_logps : old_logps, mask,
                           *s.off_policy_mask_threshold);

  // importance weights: per token, or the sequence's mean log-ratio (GSPO) -> [B, 1]
  auto log_ratio = logps - old_logps;
  torch::Tensor log_weights = log_ratio;
  if (s.importance_sampling_level == ImportanceSamplingLevel::Sequence)
    log_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).unsqueeze(-1);
  auto coef_1 = torch::exp(log_weights);

  torch::Tensor per_token_kl;
  if (s.beta != 0.0) {
    auto ref_minus = in.ref_per_token_logps.to(dtype) - logps;
    per_token_kl = torch::exp(ref_minus) - ref_minus - 1;  // k3 estimator
    // importance-sampling correction of the KL: the ratio before any delta cap, as TRL applies it
    if (s.use_bias_correction_kl) per_token_kl = per_token_kl * coef_1;
  }

  torch::Tensor per_token_loss;
  if (s.loss_type == LossType::Cispo) {
    auto capped = coef_1.clamp_max(s.epsilon_high).detach();
    per_token_loss = -capped * advantages * logps;
  } else if (s.loss_type == LossType::Sapo) {
    // TRL builds the temperatures as float32 tensors; round them the same way
    const double positive = static_cast<float>(s.sapo_temperature_pos);
    const double negative = static_cast<float>(s.sapo_temperature_neg);
    auto temperatures = torch::where(advantages > 0, torch::full_like(advantages, positive),
                                     torch::full_like(advantages, negative));
    auto soft_coef = torch::sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures;
    per_token_loss = -soft_coef * advantages;
  } else {
    auto coef_2 = coef_1.clamp(1 - s.epsilon_low, 1 + s.epsilon_high);
    if (s.delta) coef_1 = coef_1.clamp_max(*s.delta);  // also what the clip metrics see, as in TRL
    per_token_loss = -torch::min(coef_1 * advantages, coef_2 * advantages);
  }
  if (keep.defined()) per_token_loss = per_token_loss * keep;
  if (in.entropy_mask.defined()) per_token_loss = per_token_loss * in.entropy_mask.to(dtype);
  if (in.importance_sampling_ratio.defined()) per_token_loss = per_token_loss * in.importance_sampling_ratio.to(dtype);
  if (s.beta != 0.0) per_token_loss = per_token_loss + s.beta * per_token_kl;

  const double accumulation = static_cast<double>(s.gradient_accumulation_steps);
  torch::Tensor loss;
  if (s.loss_type == LossType::Grpo || s.loss_type == LossType::Sapo) {
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).mean() / accumulation;
  } else if (s.loss_type == LossType::Bnpo) {
    loss = (per_token_loss * mask).sum() / mask.sum().clamp_min(1.0) / accumulation;
  } else if (s.loss_type == LossType::DrGrpo) {
    loss = (per_token_loss * mask).sum() / static_cast<double>(batch * s.max_completion_length) / accumulation;
  } else if (s.loss_type == LossType::Dapo || s.loss_type == LossType::Cispo) {
    // num_items_in_batch spans the generation batch: rescale it to one accumulation window
    const double steps_per_generation =
        static_cast<double>(s.steps_per_generation > 0 ? s.steps_per_generation : s.gradient_accumulation_steps);
    const double normaliser = std::max(in.num_items_in_batch, 1.0) / static_cast<double>(s.num_processes) *
                              accumulation / steps_per_generation;
    loss = (per_token_loss * mask).sum() / normaliser;
  } else {  // luspo: each sequence's summed loss (its length times its mean), averaged over sequences
    loss = (per_token_loss * mask).sum(-1).mean() / accumulation;
  }

  LossOutput out;
  out.loss = loss;
  add_loss_metrics(out, in, s, mask, coef_1, advantages, per_token_kl);
  if (keep.defined())
    out.means["sampling/off_policy_masked_fraction"] =
        MeanPart{(1 - keep).sum().to(torch::kFloat64),
                 torch::full({}, static_cast<double>(batch), keep.options().dtype(torch::kFloat64))};
  return out;
}

}  // namespace rayless
