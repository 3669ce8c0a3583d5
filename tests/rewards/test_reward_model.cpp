// Reward models against transformers (tests/data/reward-model/, written by
// tools/make_reward_model_golden.py): Qwen2/LlamaForSequenceClassification scores of prompt +
// completion, batched with right padding as TRL does; and the one-line errors for a directory that is
// not a single-score classifier.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/rewards/reward_model.h"

using namespace rayless;
namespace fs = std::filesystem;

namespace {
const fs::path kFixture = fs::path(RAYLESS_TEST_DATA) / "reward-model";

nlohmann::json cases() {
  std::ifstream in(kFixture / "cases.json");
  return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("reward model: scores equal transformers' for Qwen2 and Llama classifiers (batched, right-padded)") {
  const nlohmann::json fixture = cases();
  for (const std::string arch : {"qwen2", "llama"}) {
    for (int64_t batch_size : {1, 3, 8}) {
      RewardModel model("rm", kFixture / arch, "", batch_size);
      std::vector<std::string> prompts, completions;
      for (const auto& c : fixture["cases"]) {
        prompts.push_back(c["prompt"].get<std::string>());
        completions.push_back(c["completion"].get<std::string>());
      }
      const std::vector<double> scores =
          model.score(prompts, completions, std::vector<int64_t>(prompts.size(), 0), std::vector<nlohmann::json>(prompts.size()));
      const auto& expected = fixture["architectures"][arch]["scores"];
      REQUIRE(scores.size() == expected.size());
      double worst = 0;
      for (size_t i = 0; i < scores.size(); ++i) worst = std::max(worst, std::abs(scores[i] - expected[i].get<double>()));
      INFO(arch << " batch " << batch_size << ": largest difference " << worst);
      CHECK(worst < 1e-4);
    }
  }
}

TEST_CASE("reward model: through RewardSet as a named [reward.models.NAME] function, in its own column") {
  Config config;
  config.reward.functions = {"length", "rm"};
  config.reward.models["rm"].path = (kFixture / "qwen2").string();
  RewardSet rewards(config);
  REQUIRE(rewards.names() == std::vector<std::string>{"length", "rm"});
  const nlohmann::json fixture = cases();
  const auto& c = fixture["cases"][0];
  const torch::Tensor out = rewards.score({c["prompt"].get<std::string>()}, {c["completion"].get<std::string>()}, {2},
                                          {nlohmann::json::object()});
  CHECK(std::abs(out[0][1].item<double>() - fixture["architectures"]["qwen2"]["scores"][0].get<double>()) < 1e-4);
}

TEST_CASE("reward model: a directory that is not a single-score classifier is an InputError naming the file") {
  const fs::path dir = fs::temp_directory_path() / "rayless-rm-two-labels";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(kFixture / "qwen2")) fs::copy(entry.path(), dir / entry.path().filename());
  nlohmann::json config;
  {
    std::ifstream in(dir / "config.json");
    config = nlohmann::json::parse(in);
  }
  config["id2label"] = {{"0", "LABEL_0"}, {"1", "LABEL_1"}};
  {
    std::ofstream out(dir / "config.json");
    out << config.dump();
  }
  CHECK_THROWS_WITH(RewardModel("rm", dir, "", 4),
                    Catch::Contains((dir / "config.json").string()) && Catch::Contains("num_labels = 1") &&
                        Catch::Contains("2 labels"));
  fs::remove(dir / "config.json");
  std::ofstream(dir / "config.json") << nlohmann::json::parse(std::ifstream(kFixture / "llama" / "config.json")).dump();
  // a causal LM directory: no score.weight
  CHECK_THROWS_AS(RewardModel("rm", fs::path(RAYLESS_SOURCE_DIR) / "configs" / "models" / "tiny", "byte", 4), InputError);
  fs::remove_all(dir);
}

TEST_CASE("reward model: conversational rows go through the reward model's own chat template, as TRL's") {
  const nlohmann::json fixture = cases();
  RewardModel model("rm", kFixture / "qwen2", "", 2);
  std::vector<std::string> prompts, completions;
  std::vector<nlohmann::json> rows;
  for (const auto& c : fixture["conversation_cases"]) {
    prompts.push_back("the policy's prompt text, which a conversational row does not use");
    completions.push_back(c["completion"].get<std::string>());
    rows.push_back({{"messages", c["messages"]}, {"answer", "x"}});
    CHECK(model.check_row(rows.back()).empty());
  }
  const std::vector<double> scores = model.score(prompts, completions, std::vector<int64_t>(rows.size(), 0), rows);
  REQUIRE(scores.size() == fixture["conversation_cases"].size());
  for (size_t i = 0; i < scores.size(); ++i)
    CHECK(std::abs(scores[i] - fixture["conversation_cases"][i]["qwen2_score"].get<double>()) < 1e-4);

  // the Llama reward model has no template: a conversational dataset is refused at the start, by name
  RewardModel no_template("judge", kFixture / "llama", "", 2);
  CHECK_THAT(no_template.check_row(rows[0]), Catch::Contains("reward model judge") && Catch::Contains("has none"));
  CHECK(no_template.check_row({{"prompt", "plain"}}).empty());
}
