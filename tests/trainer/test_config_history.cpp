#include <filesystem>
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/trainer/config_history.h"

using namespace rayless;

namespace {
Config with(const std::vector<std::string>& overrides) { return config_from_overrides(overrides); }

std::vector<std::string> keys_of(const std::vector<ConfigChange>& changes) {
  std::vector<std::string> keys;
  for (const ConfigChange& c : changes) keys.push_back(c.key);
  return keys;
}
}  // namespace

TEST_CASE("config_changes names each key that differs, with both values") {
  const std::string before = config_to_toml(with({}));
  CHECK(config_changes(before, before, "old.toml").empty());
  const auto changes = config_changes(
      before, config_to_toml(with({"grpo.num_generations=4", "model.path=\"m2\"", "optim.learning_rate=2e-6", "train.max_steps=7",
                                   "generation.stop_strings=[\"###\"]"})),
      "old.toml");
  CHECK(keys_of(changes) == std::vector<std::string>{"generation.stop_strings", "grpo.num_generations", "model.path",
                                                     "optim.learning_rate", "train.max_steps"});
  CHECK(changes[1].before == "8");
  CHECK(changes[1].now == "4");
  // a path given by --set resolves against the working directory (docs/config.md, "Paths")
  CHECK(changes[2].now == "\"" + (std::filesystem::current_path() / "m2").string() + "\"");
  // named tables: a new one, a changed key, and keys another version does not write are not compared
  const std::string workers = config_to_toml(
      with({"reward.functions=[\"length\",\"j\"]", "reward.workers.j.command=\"judge\"", "reward.workers.j.timeout_s=5"}));
  const auto added = config_changes(before, workers, "old.toml");
  CHECK(keys_of(added) == std::vector<std::string>{"reward.functions", "reward.workers.j.batch_size",
                                                   "reward.workers.j.command", "reward.workers.j.timeout_s"});
  CHECK(added[2].before == "(none)");
  CHECK(config_changes(workers + "\n[future]\nkey = 1\n", workers, "old.toml").empty());
  CHECK_THROWS_WITH(config_changes("[grpo\n", before, "ckpt/config.resolved.toml"),
                    Catch::StartsWith("ckpt/config.resolved.toml:1: not a rayless config"));
}

TEST_CASE("what may change on resume: the table names real keys, docs/hpc.md lists every entry") {
  std::set<std::string> keys, sections;
  for (const ConfigField& f : config_fields()) {
    keys.insert(f.name);
    sections.insert(f.name.substr(0, f.name.find('.') + 1));
  }
  std::ifstream in(std::string(RAYLESS_SOURCE_DIR) + "/docs/hpc.md");
  std::stringstream docs;
  docs << in.rdbuf();
  for (const ResumeFreeKey& k : resume_free_keys()) {
    INFO(k.pattern);
    const bool named = k.pattern.rfind("reward.workers.*.", 0) == 0 || k.pattern.rfind("reward.models.*.", 0) == 0;
    CHECK((keys.count(k.pattern) || sections.count(k.pattern) || named));
    CHECK(docs.str().find("`" + k.pattern + "`") != std::string::npos);
  }
  CHECK(may_change_on_resume("train.max_steps"));
  CHECK(may_change_on_resume("log.logging_steps"));
  CHECK(may_change_on_resume("distributed.zero_stage"));
  CHECK(may_change_on_resume("reward.workers.judge.timeout_s"));
  CHECK_FALSE(may_change_on_resume("reward.workers.judge.command"));
  CHECK_FALSE(may_change_on_resume("reward.workers.a.b.timeout_s"));
  CHECK_FALSE(may_change_on_resume("train.max_steps_extra"));
  CHECK_FALSE(may_change_on_resume("logx.level"));
  for (const char* key : {"model.path", "grpo.num_generations", "grpo.loss_type", "train.seed", "generation.max_completion_length",
                          "lora.r", "data.path", "optim.learning_rate", "train.per_device_train_batch_size"})
    CHECK_FALSE(may_change_on_resume(key));
}

TEST_CASE("check_resume_changes: refused keys in one line, allowed ones pass, none mid-cycle") {
  const std::vector<ConfigChange> changes = {{"train.max_steps", "4", "8"}, {"grpo.beta", "0.0", "0.04"}, {"train.seed", "1", "2"}};
  CHECK_THROWS_WITH(check_resume_changes(changes, {}, false, "run/checkpoints/step-4"),
                    "--resume run/checkpoints/step-4: the config changes settings that change the run: grpo.beta 0.0 -> "
                    "0.04, train.seed 1 -> 2; resume with the checkpoint's values, or pass --allow-config-change KEY "
                    "for each key to change it on purpose (docs/hpc.md, Resuming)");
  CHECK_THROWS_WITH(check_resume_changes(changes, {"grpo.beta"}, false, "c"), Catch::Contains(": train.seed 1 -> 2;"));
  CHECK_NOTHROW(check_resume_changes(changes, {"grpo.beta", "train.seed"}, false, "c"));
  CHECK_THROWS_WITH(check_resume_changes(changes, {"grpo.beta", "train.seed"}, true, "c"),
                    Catch::Contains("middle of a generation cycle") && Catch::Contains("grpo.beta 0.0 -> 0.04, train.seed 1 -> 2"));
  CHECK_NOTHROW(check_resume_changes({{"log.console", "true", "false"}}, {}, true, "c"));
  CHECK(segment_config_name(12) == "config.segment-00000012.toml");
}
