#include <catch2/catch.hpp>

#include <cmath>

#include "rayless/base/error.h"
#include "rayless/grpo/advantages.h"

using namespace rayless;

namespace {
const double kNaN = std::nan("");

// The group z-score of a few numbers, written out by hand: Bessel-corrected std as TRL's nanstd
// computes it, mean of squares times count / (count - 1), that factor being a float32 tensor.
std::vector<double> zscore(const std::vector<double>& x) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  double squares = 0;
  for (double v : x) squares += (v - mean) * (v - mean);
  const double n = static_cast<double>(x.size());
  const double std = std::sqrt(squares / n * static_cast<double>(static_cast<float>(n / (n - 1))));
  std::vector<double> out;
  for (double v : x) out.push_back((v - mean) / (std + 1e-4));
  return out;
}
}  // namespace

TEST_CASE("sum_then_normalize with group scaling is the weighted group z-score") {
  auto rewards = torch::tensor({{1.0, 0.0}, {2.0, 1.0}, {0.0, 1.0}, {5.0, 5.0}, {4.0, 1.0}, {1.0, 2.0}},
                               torch::kFloat64);
  AdvantageSettings settings{3, ScaleRewards::Group, RewardAggregation::SumThenNormalize};
  auto out = compute_advantages(rewards, {1.0, 0.5}, settings);
  auto first = zscore({1.0, 2.5, 0.5});
  auto second = zscore({7.5, 4.5, 2.0});
  for (int i = 0; i < 3; ++i) {
    CHECK(out.advantages[i].item<double>() == Approx(first[i]).epsilon(1e-12));
    CHECK(out.advantages[3 + i].item<double>() == Approx(second[i]).epsilon(1e-12));
  }
  // scale_rewards = none: only the group mean is subtracted
  settings.scale_rewards = ScaleRewards::None;
  out = compute_advantages(rewards, {1.0, 0.5}, settings);
  CHECK(out.advantages[0].item<double>() == Approx(1.0 - 4.0 / 3.0).epsilon(1e-12));
}

TEST_CASE("NaN rewards are left out and unscorable completions get advantage 0") {
  auto rewards = torch::tensor({{1.0, kNaN}, {kNaN, kNaN}, {3.0, kNaN}, {2.0, kNaN}}, torch::kFloat64);
  auto out = compute_advantages(rewards, {1.0, 1.0}, {4, ScaleRewards::Group, RewardAggregation::SumThenNormalize});
  auto expected = zscore({1.0, 3.0, 2.0});
  CHECK(out.advantages[0].item<double>() == Approx(expected[0]).epsilon(1e-12));
  CHECK(out.advantages[1].item<double>() == 0.0);
  CHECK(out.advantages[2].item<double>() == Approx(expected[1]).epsilon(1e-12));
  CHECK(std::isnan(out.rewards[1].item<double>()));
}

TEST_CASE("batch scaling divides by the std of the whole batch, group scaling by each group's") {
  torch::manual_seed(3);
  auto rewards = torch::randn({12, 2}, torch::kFloat64);
  rewards[5][1] = kNaN;
  const std::vector<double> weights = {1.0, 2.0};
  AdvantageSettings settings{4, ScaleRewards::Batch, RewardAggregation::SumThenNormalize};
  auto batch = compute_advantages(rewards, weights, settings);
  auto summed = torch::nansum(rewards * torch::tensor(weights, torch::kFloat64), 1);
  const double batch_std = summed.std().item<double>();
  auto group_mean = summed.view({-1, 4}).mean(1).repeat_interleave(4);
  CHECK(torch::allclose(batch.advantages, (summed - group_mean) / (batch_std + 1e-4), 1e-6, 1e-12));
  settings.scale_rewards = ScaleRewards::Group;
  CHECK_FALSE(torch::allclose(compute_advantages(rewards, weights, settings).advantages, batch.advantages));
}

TEST_CASE("a float32 table is worked in float32, as TRL holds rewards") {
  auto rewards = torch::tensor({{1.0f}, {0.0f}, {0.0f}, {0.0f}});
  auto out = compute_advantages(rewards, {1.0}, {4, ScaleRewards::Group, RewardAggregation::SumThenNormalize});
  CHECK(out.advantages.scalar_type() == torch::kFloat32);
  // TRL's float32 std of {1, 0, 0, 0}: sqrt(3/16 * float32(4/3))
  const float variance = 0.1875f * static_cast<float>(4.0 / 3.0);
  CHECK(out.std_rewards[0].item<float>() == std::sqrt(variance));
  auto metrics = reward_metrics(rewards, out);
  CHECK(metrics.reward == 0.25);
  CHECK(metrics.reward_std == static_cast<double>(std::sqrt(variance)));
}

TEST_CASE("normalize_then_sum z-scores each function in its group, then the batch") {
  auto rewards = torch::tensor({{1.0, 10.0}, {2.0, 30.0}, {4.0, 20.0}, {0.0, 1.0}, {1.0, 1.0}, {2.0, 4.0}},
                               torch::kFloat64);
  auto out = compute_advantages(rewards, {1.0, 1.0}, {3, ScaleRewards::Group, RewardAggregation::NormalizeThenSum});
  std::vector<double> summed;
  auto a0 = zscore({1, 2, 4}), a1 = zscore({10, 30, 20}), b0 = zscore({0, 1, 2}), b1 = zscore({1, 1, 4});
  for (int i = 0; i < 3; ++i) summed.push_back(a0[i] + a1[i]);
  for (int i = 0; i < 3; ++i) summed.push_back(b0[i] + b1[i]);
  auto expected = zscore(summed);
  for (int i = 0; i < 6; ++i) CHECK(out.advantages[i].item<double>() == Approx(expected[i]).epsilon(1e-10));
}

TEST_CASE("advantages reject bad input with one line naming the problem") {
  auto rewards = torch::zeros({6, 2}, torch::kFloat64);
  CHECK_THROWS_WITH(compute_advantages(rewards, {1.0, 1.0}, {4, ScaleRewards::Group, RewardAggregation::SumThenNormalize}),
                    Catch::Contains("not a multiple of grpo.num_generations"));
  CHECK_THROWS_WITH(compute_advantages(rewards, {1.0}, {3, ScaleRewards::Group, RewardAggregation::SumThenNormalize}),
                    Catch::Contains("reward_weights"));
  CHECK_THROWS_WITH(parse_choice<ScaleRewards>("groups", "grpo.scale_rewards"),
                    Catch::Contains("grpo.scale_rewards"));
  CHECK_THROWS_WITH(parse_choice<RewardAggregation>("sum", "grpo.multi_objective_aggregation"),
                    Catch::Contains("grpo.multi_objective_aggregation"));
  CHECK_THROWS_AS(compute_advantages(torch::zeros({6}), {1.0}, {3, ScaleRewards::Group, RewardAggregation::SumThenNormalize}), InputError);
}
