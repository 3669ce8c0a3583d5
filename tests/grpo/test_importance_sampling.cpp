// TRL 1.16's importance-sampling correction and off-policy sequence mask, against their formulas
// written out by hand (the whole-step fixtures in tests/data/trl-steps/is_* check them through TRL).
#include <catch2/catch.hpp>

#include <cmath>

#include "rayless/base/config.h"
#include "rayless/comm/communicator.h"
#include "rayless/grpo/importance_sampling.h"
#include "rayless/grpo/loss.h"

using namespace rayless;

namespace {
// two completions of three and two tokens; old - sampling = d
const torch::Tensor kMask = torch::tensor({{1, 1, 1}, {1, 1, 0}}, torch::kFloat32);
torch::Tensor old_logps() { return torch::tensor({{-1.0, -2.0, -0.5}, {-3.0, -1.0, -9.0}}, torch::kFloat64); }
torch::Tensor sampling_logps() {
  // d = {{1.5, -1.0, 0.1}, {0.2, 0.7, whatever}}: ratios e^1.5 = 4.48, e^-1 = 0.37, e^0.1 = 1.105, ...
  return torch::tensor({{-2.5, -1.0, -0.6}, {-3.2, -1.7, -4.0}}, torch::kFloat64);
}
ImportanceSamplingSettings settings(ImportanceSamplingMode mode, std::optional<double> low, std::optional<double> high) {
  ImportanceSamplingSettings s;
  s.mode = mode;
  s.clip_min = low;
  s.clip_max = high;
  return s;
}
}  // namespace

TEST_CASE("token_truncate clips each token's ratio exp(old - sampling) to [C_min, C_max]") {
  const auto is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                            settings(ImportanceSamplingMode::TokenTruncate, 0.5, 3.0));
  REQUIRE(is.ratio.sizes() == torch::IntArrayRef({2, 3}));
  CHECK(is.ratio[0][0].item<double>() == 3.0);                           // e^1.5 capped
  CHECK(is.ratio[0][1].item<double>() == 0.5);                           // e^-1 raised
  CHECK(is.ratio[0][2].item<double>() == Approx(std::exp(0.1)).epsilon(1e-15));
  CHECK(is.ratio[1][1].item<double>() == Approx(std::exp(0.7)).epsilon(1e-15));
  CHECK(is.ratio[1][2].item<double>() == 1.0);  // past the end: difference 0
  // TRL's metrics: |old - sampling| and the ratio over active tokens
  CHECK(is.logp_difference_max == Approx(1.5));
  CHECK(is.logp_difference_mean == Approx((1.5 + 1.0 + 0.1 + 0.2 + 0.7) / 5));
  CHECK(is.ratio_min == 0.5);
  CHECK(is.ratio_max == 3.0);
  CHECK(is.ratio_mean == Approx((3.0 + 0.5 + std::exp(0.1) + std::exp(0.2) + std::exp(0.7)) / 5));
  CHECK(is.masked == 0);
}

TEST_CASE("token_mask zeroes ratios outside the bounds, no C_min (TRL's None) keeps small ones") {
  auto is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                      settings(ImportanceSamplingMode::TokenMask, 0.5, 3.0));
  CHECK(is.ratio[0][0].item<double>() == 0.0);
  CHECK(is.ratio[0][1].item<double>() == 0.0);
  CHECK(is.ratio[0][2].item<double>() == Approx(std::exp(0.1)).epsilon(1e-15));
  CHECK(is.masked == 2);
  CHECK(is.considered == 5);
  is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                 settings(ImportanceSamplingMode::TokenMask, std::nullopt, 3.0));
  CHECK(is.ratio[0][1].item<double>() == Approx(std::exp(-1.0)).epsilon(1e-15));
  CHECK(is.masked == 1);
}

TEST_CASE("sequence modes: one ratio per completion from its summed log-ratio") {
  auto is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                      settings(ImportanceSamplingMode::SequenceTruncate, std::nullopt, 2.0));
  REQUIRE(is.ratio.sizes() == torch::IntArrayRef({2, 1}));
  CHECK(is.ratio[0][0].item<double>() == Approx(std::exp(0.6)).epsilon(1e-14));  // 1.5 - 1 + 0.1
  CHECK(is.ratio[1][0].item<double>() == 2.0);                                    // e^(0.2 + 0.7) = 2.46, capped
  CHECK(is.ratio_min == Approx(std::exp(0.6)));                                   // over sequences
  CHECK(is.ratio_mean == Approx((std::exp(0.6) + 2.0) / 2));
  is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                 settings(ImportanceSamplingMode::SequenceMask, std::nullopt, 2.0));
  CHECK(is.ratio[0][0].item<double>() == Approx(std::exp(0.6)).epsilon(1e-14));
  CHECK(is.ratio[1][0].item<double>() == 0.0);
  CHECK(is.masked == 1);
  CHECK(is.considered == 2);
}

TEST_CASE("a token without a sampling log-prob (NaN) gets ratio 1 and stays out of the difference metric") {
  torch::Tensor sampling = sampling_logps();
  sampling[0][0] = std::nan("");
  const auto is = importance_sampling_ratio(old_logps(), sampling, kMask,
                                            settings(ImportanceSamplingMode::TokenTruncate, std::nullopt, 3.0));
  CHECK(is.ratio[0][0].item<double>() == 1.0);
  CHECK(is.logp_difference_max == Approx(1.0));
  CHECK(is.logp_difference_mean == Approx((1.0 + 0.1 + 0.2 + 0.7) / 4));
}

TEST_CASE("config: TRL's defaults, and 0 as TRL's None") {
  Config c;
  CHECK(c.grpo.vllm_importance_sampling_correction);
  const auto s = importance_sampling_settings_from_config(c);
  CHECK(s.mode == ImportanceSamplingMode::SequenceMask);
  CHECK(s.clip_max == 3.0);
  CHECK_FALSE(s.clip_min.has_value());
  c.grpo.vllm_importance_sampling_clip_max = 0;
  CHECK_FALSE(importance_sampling_settings_from_config(c).clip_max.has_value());
}

TEST_CASE("off-policy mask keeps positive advantages and completions whose mean log-ratio is small") {
  // sampling - current per active token: row 0 mean (1 + 1 + 1) / 3 = 1; row 1 (0.05 + 0.05) / 2 = 0.05
  const torch::Tensor current = torch::tensor({{-1.0, -1.0, -1.0}, {-1.0, -1.0, -1.0}}, torch::kFloat64);
  const torch::Tensor sampling = torch::tensor({{0.0, 0.0, 0.0}, {-0.95, -0.95, 50.0}}, torch::kFloat64);
  auto keep = [&](double a0, double a1, double threshold) {
    return off_policy_mask(torch::tensor({a0, a1}, torch::kFloat64), current, sampling, kMask, threshold);
  };
  CHECK(torch::equal(keep(-1, -1, 0.5), torch::tensor({{0.0f}, {1.0f}})));  // row 0 dropped
  CHECK(torch::equal(keep(1, -1, 0.5), torch::tensor({{1.0f}, {1.0f}})));   // a positive advantage stays
  CHECK(torch::equal(keep(-1, -1, 0.01), torch::tensor({{0.0f}, {0.0f}})));
  CHECK(torch::equal(keep(0, -1, 0.01), torch::tensor({{1.0f}, {0.0f}})));  // advantage 0 counts as >= 0
}

TEST_CASE("the loss: off-policy mask, then the importance ratio weighs each token, the KL term unweighted") {
  LossInputs in;
  in.per_token_logps = old_logps().clone().requires_grad_(true);
  in.advantages = torch::tensor({1.0, -2.0}, torch::kFloat64);
  in.completion_mask = kMask;
  LossSettings s;
  s.loss_type = LossType::Bnpo;  // sum over active tokens / their count
  const double plain = compute_loss(in, s).loss.item<double>();
  CHECK(plain == Approx(-(3 * 1.0 + 2 * -2.0) / 5.0));
  const auto is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                            settings(ImportanceSamplingMode::SequenceTruncate, std::nullopt, 2.0));
  in.importance_sampling_ratio = is.ratio;
  CHECK(compute_loss(in, s).loss.item<double>() == Approx(-(3 * std::exp(0.6) - 2 * 2 * 2.0) / 5.0));
  // the mask drops row 1 (negative advantage, sampling far above current), row 0 stays (positive)
  in.sampling_per_token_logps = in.per_token_logps.detach() + 1.0;
  s.off_policy_mask_threshold = 0.5;
  const LossOutput out = compute_loss(in, s);
  CHECK(out.loss.item<double>() == Approx(-(3 * std::exp(0.6)) / 5.0));
  CHECK(out.metrics().at("sampling/off_policy_masked_fraction") == 0.5);
}

TEST_CASE("metrics over ranks as TRL gathers them (one process: its own values)") {
  auto comm = make_single_communicator();
  const auto is = importance_sampling_ratio(old_logps(), sampling_logps(), kMask,
                                            settings(ImportanceSamplingMode::TokenMask, 0.5, 3.0));
  const auto m = importance_sampling_metrics(*comm, is);
  CHECK(m.at("sampling/importance_sampling_ratio/min") == 0.0);
  CHECK(m.at("sampling/importance_sampling_ratio/max") == Approx(std::exp(0.7)));
  CHECK(m.at("sampling/importance_sampling_ratio/mean") == Approx((std::exp(0.1) + std::exp(0.2) + std::exp(0.7)) / 5));
  CHECK(m.at("sampling/sampling_logp_difference/max") == Approx(1.5));
  CHECK(m.at("sampling/importance_sampling_ratio/masked_fraction") == Approx(2.0 / 5));
}
