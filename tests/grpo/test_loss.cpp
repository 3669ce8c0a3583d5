#include <catch2/catch.hpp>

#include <cmath>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/grpo/loss.h"

using namespace rayless;

namespace {
LossInputs small_inputs() {
  torch::manual_seed(2);
  LossInputs in;
  in.per_token_logps = (-torch::rand({3, 4}, torch::kFloat64)).requires_grad_(true);
  in.old_per_token_logps = in.per_token_logps.detach() + 0.3 * torch::randn({3, 4}, torch::kFloat64);
  in.advantages = torch::tensor({1.0, -0.5, 0.25}, torch::kFloat64);
  in.completion_mask = torch::tensor({{1, 1, 1, 0}, {1, 1, 0, 0}, {0, 0, 0, 0}}, torch::kInt8);
  in.entropies = torch::rand({3, 4}, torch::kFloat64);
  in.num_items_in_batch = 5;
  return in;
}
}  // namespace

TEST_CASE("on-policy grpo loss is minus the mean advantage of sequences with tokens, per step") {
  LossInputs in = small_inputs();
  in.old_per_token_logps = torch::Tensor();  // on-policy: ratio 1
  LossSettings settings;
  settings.loss_type = LossType::Grpo;
  settings.gradient_accumulation_steps = 2;
  auto out = compute_loss(in, settings);
  // each sequence contributes -A (empty third row contributes 0), mean over 3 rows, / 2 steps
  CHECK(out.loss.item<double>() == Approx(-(1.0 - 0.5 + 0.0) / 3.0 / 2.0).epsilon(1e-12));
  out.loss.backward();
  // d/d logp of -A * exp(logp - logp.detach()) / len / B / steps = -A / len / 3 / 2
  auto grad = in.per_token_logps.grad();
  CHECK(grad[0][0].item<double>() == Approx(-1.0 / 3 / 3 / 2).epsilon(1e-12));
  CHECK(grad[1][1].item<double>() == Approx(0.5 / 2 / 3 / 2).epsilon(1e-12));
  CHECK(grad[2][0].item<double>() == 0.0);
  auto metrics = out.metrics();
  CHECK(metrics.at("clip_ratio/region_mean") == 0.0);
  CHECK(metrics.at("clip_ratio/low_min") == 0.0);
}

TEST_CASE("dapo divides by the global token count per process and dr_grpo by B times max length") {
  LossInputs in = small_inputs();
  LossSettings settings;
  settings.loss_type = LossType::Bnpo;
  const double bnpo = compute_loss(in, settings).loss.item<double>();  // mean over the 5 active tokens
  settings.loss_type = LossType::Dapo;
  in.num_items_in_batch = 10;
  settings.num_processes = 2;
  CHECK(compute_loss(in, settings).loss.item<double>() == Approx(bnpo).epsilon(1e-12));
  settings.loss_type = LossType::DrGrpo;
  settings.max_completion_length = 4;
  CHECK(compute_loss(in, settings).loss.item<double>() == Approx(bnpo * 5 / 12).epsilon(1e-12));
}

TEST_CASE("an all-false entropy mask leaves only the KL term") {
  LossInputs in = small_inputs();
  in.ref_per_token_logps = in.per_token_logps.detach() - 0.1;
  in.entropy_mask = torch::zeros({3, 4}, torch::kBool);
  LossSettings settings;
  settings.loss_type = LossType::Bnpo;
  settings.beta = 0.5;
  settings.use_bias_correction_kl = false;
  auto out = compute_loss(in, settings);
  const double kl_value = std::exp(-0.1) + 0.1 - 1;
  CHECK(out.loss.item<double>() == Approx(0.5 * kl_value).epsilon(1e-9));
  CHECK(out.metrics().at("kl") == Approx(kl_value).epsilon(1e-9));
  // TRL's default: the KL weighted by the importance ratio exp(logp - old) per token
  settings.use_bias_correction_kl = true;
  out = compute_loss(in, settings);
  auto mask = in.completion_mask.to(torch::kFloat64);
  auto ratio = torch::exp(in.per_token_logps.detach() - in.old_per_token_logps);
  const double corrected = ((ratio * kl_value) * mask).sum().item<double>() / mask.sum().item<double>();
  CHECK(out.loss.item<double>() == Approx(0.5 * corrected).epsilon(1e-9));
  CHECK(out.metrics().at("kl") == Approx(corrected).epsilon(1e-9));
  CHECK(corrected != Approx(kl_value).epsilon(1e-6));  // the inputs are off-policy: the correction matters
}

TEST_CASE("loss settings come from the config") {
  Config config;
  config.grpo.loss_type = LossType::Cispo;
  config.grpo.epsilon = 0.1;
  config.grpo.epsilon_high = 0;
  config.grpo.delta = 0;
  auto settings = loss_settings_from_config(config, 4);
  CHECK(settings.epsilon_high == 0.1);
  CHECK_FALSE(settings.delta.has_value());
  CHECK(settings.num_processes == 4);
}

TEST_CASE("loss rejects bad input with one line naming the problem") {
  LossInputs in = small_inputs();
  LossSettings settings;
  // names are parsed once, where they are read (config, reference cases)
  CHECK_THROWS_WITH(parse_choice<LossType>("ppo", "grpo.loss_type"), Catch::Contains("grpo.loss_type: unknown value \"ppo\""));
  CHECK_THROWS_WITH(parse_choice<ImportanceSamplingLevel>("sentence", "grpo.importance_sampling_level"),
                    Catch::Contains("token | sequence"));
  settings.loss_type = LossType::Grpo;
  LossInputs bad = in;
  bad.completion_mask = torch::ones({3, 5});
  CHECK_THROWS_WITH(compute_loss(bad, settings), Catch::Contains("completion_mask"));
  bad = in;
  bad.advantages = torch::ones({2}, torch::kFloat64);
  CHECK_THROWS_WITH(compute_loss(bad, settings), Catch::Contains("advantages"));
  settings.beta = 0.1;
  CHECK_THROWS_WITH(compute_loss(in, settings), Catch::Contains("ref_per_token_logps"));
}
