#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "rayless/error.h"
#include "rayless/grpo/advantages.h"

using namespace rayless;

namespace {
const double kNaN = std::nan("");

// The group z-score of a few numbers, written out by hand (Bessel-corrected std).
std::vector<double> zscore(const std::vector<double>& x) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  double squares = 0;
  for (double v : x) squares += (v - mean) * (v - mean);
  const double std = std::sqrt(squares / (x.size() - 1));
  std::vector<double> out;
  for (double v : x) out.push_back((v - mean) / (std + 1e-4));
  return out;
}
}  // namespace

TEST_CASE("sum_then_normalize with group scaling is the weighted group z-score") {
  auto rewards = torch::tensor({{1.0, 0.0}, {2.0, 1.0}, {0.0, 1.0}, {5.0, 5.0}, {4.0, 1.0}, {1.0, 2.0}},
                               torch::kFloat64);
  AdvantageSettings settings{3, "group", "sum_then_normalize"};
  auto out = compute_advantages(rewards, {1.0, 0.5}, settings);
  auto first = zscore({1.0, 2.5, 0.5});
  auto second = zscore({7.5, 4.5, 2.0});
  for (int i = 0; i < 3; ++i) {
    CHECK(out.advantages[i].item<double>() == Approx(first[i]).epsilon(1e-12));
    CHECK(out.advantages[3 + i].item<double>() == Approx(second[i]).epsilon(1e-12));
  }
  // scale_rewards = none: only the group mean is subtracted
  settings.scale_rewards = "none";
  out = compute_advantages(rewards, {1.0, 0.5}, settings);
  CHECK(out.advantages[0].item<double>() == Approx(1.0 - 4.0 / 3.0).epsilon(1e-12));
}

TEST_CASE("NaN rewards are left out and unscorable completions get advantage 0") {
  auto rewards = torch::tensor({{1.0, kNaN}, {kNaN, kNaN}, {3.0, kNaN}, {2.0, kNaN}}, torch::kFloat64);
  auto out = compute_advantages(rewards, {1.0, 1.0}, {4, "group", "sum_then_normalize"});
  auto expected = zscore({1.0, 3.0, 2.0});
  CHECK(out.advantages[0].item<double>() == Approx(expected[0]).epsilon(1e-12));
  CHECK(out.advantages[1].item<double>() == 0.0);
  CHECK(out.advantages[2].item<double>() == Approx(expected[1]).epsilon(1e-12));
  CHECK(std::isnan(out.rewards[1].item<double>()));
}

// An in-process "world" of two ranks for GlobalSum: each call waits for the other rank's call and
// returns the element-wise sum, like an allreduce.
class TwoRankSum {
 public:
  torch::Tensor operator()(int rank, const torch::Tensor& local) {
    std::unique_lock<std::mutex> lock(mutex_);
    slots_[rank] = local.clone();
    const int round = round_;
    if (++arrived_ == 2) {
      result_ = slots_[0] + slots_[1];
      arrived_ = 0;
      ++round_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return round_ != round; });
    }
    return result_.clone();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0, round_ = 0;
  torch::Tensor slots_[2], result_;
};

TEST_CASE("batch statistics through GlobalSum equal those of the whole batch on one rank") {
  torch::manual_seed(3);
  auto rewards = torch::randn({12, 2}, torch::kFloat64);
  rewards[5][1] = kNaN;
  const std::vector<double> weights = {1.0, 2.0};
  for (const char* aggregation : {"sum_then_normalize", "normalize_then_sum"}) {
    AdvantageSettings settings{4, "batch", aggregation};
    auto whole = compute_advantages(rewards, weights, settings).advantages;
    TwoRankSum world;
    torch::Tensor shard[2];
    std::thread other([&] {
      shard[1] = compute_advantages(rewards.narrow(0, 8, 4), weights, settings,
                                    [&](const torch::Tensor& t) { return world(1, t); }).advantages;
    });
    shard[0] = compute_advantages(rewards.narrow(0, 0, 8), weights, settings,
                                  [&](const torch::Tensor& t) { return world(0, t); }).advantages;
    other.join();
    INFO(aggregation);
    CHECK(torch::allclose(torch::cat({shard[0], shard[1]}), whole, 1e-12, 1e-12));
    // and batch scaling differs from group scaling (the test can fail)
    settings.scale_rewards = "group";
    if (std::string(aggregation) == "sum_then_normalize")
      CHECK_FALSE(torch::allclose(compute_advantages(rewards, weights, settings).advantages, whole));
  }
}

TEST_CASE("normalize_then_sum z-scores each function in its group, then the batch") {
  auto rewards = torch::tensor({{1.0, 10.0}, {2.0, 30.0}, {4.0, 20.0}, {0.0, 1.0}, {1.0, 1.0}, {2.0, 4.0}},
                               torch::kFloat64);
  auto out = compute_advantages(rewards, {1.0, 1.0}, {3, "group", "normalize_then_sum"});
  std::vector<double> summed;
  auto a0 = zscore({1, 2, 4}), a1 = zscore({10, 30, 20}), b0 = zscore({0, 1, 2}), b1 = zscore({1, 1, 4});
  for (int i = 0; i < 3; ++i) summed.push_back(a0[i] + a1[i]);
  for (int i = 0; i < 3; ++i) summed.push_back(b0[i] + b1[i]);
  auto expected = zscore(summed);
  for (int i = 0; i < 6; ++i) CHECK(out.advantages[i].item<double>() == Approx(expected[i]).epsilon(1e-10));
}

TEST_CASE("advantages reject bad input with one line naming the problem") {
  auto rewards = torch::zeros({6, 2}, torch::kFloat64);
  CHECK_THROWS_WITH(compute_advantages(rewards, {1.0, 1.0}, {4, "group", "sum_then_normalize"}),
                    Catch::Contains("not a multiple of grpo.num_generations"));
  CHECK_THROWS_WITH(compute_advantages(rewards, {1.0}, {3, "group", "sum_then_normalize"}),
                    Catch::Contains("reward_weights"));
  CHECK_THROWS_WITH(compute_advantages(rewards, {1.0, 1.0}, {3, "groups", "sum_then_normalize"}),
                    Catch::Contains("grpo.scale_rewards"));
  CHECK_THROWS_WITH(compute_advantages(rewards, {1.0, 1.0}, {3, "group", "sum"}),
                    Catch::Contains("grpo.multi_objective_aggregation"));
  CHECK_THROWS_AS(compute_advantages(torch::zeros({6}), {1.0}, {3, "group", "sum_then_normalize"}), InputError);
}
