#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"

namespace fs = std::filesystem;
using namespace rayless;

namespace {
fs::path write_temp_config(const std::string& name, const std::string& text) {
  fs::path dir = fs::temp_directory_path() / "rayless-test-config";
  fs::create_directories(dir);
  fs::path path = dir / name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}
}  // namespace

TEST_CASE("config: every shipped config in configs/ passes check") {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(RAYLESS_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path());
    CHECK_NOTHROW(load_config(entry.path().string()));
    ++checked;
  }
  CHECK(checked >= 1);
}

TEST_CASE("config: TOML values land in the typed struct and overrides win") {
  auto path = write_temp_config("ok.toml",
                                "[grpo]\nnum_generations = 8\ntop_entropy_quantile = 0.2\nloss_type = \"bnpo\"\n"
                                "[train]\nmax_steps = 7\nseed = 3\nper_device_train_batch_size = 16\n"
                                "[generation]\nstop_strings = [\"\\n\\n\"]\n");
  Config c = load_config(path.string(), {"grpo.num_iterations=3", "optim.learning_rate=2e-5", "grpo.loss_type=grpo"});
  CHECK(c.grpo.num_generations == 8);
  CHECK(c.grpo.top_entropy_quantile == Approx(0.2));
  CHECK(c.train.max_steps == 7);
  CHECK(c.train.seed == 3);
  CHECK(c.grpo.num_iterations == 3);
  CHECK(c.optim.learning_rate == Approx(2e-5));
  CHECK(c.grpo.loss_type == LossType::Grpo);
  REQUIRE(c.generation.stop_strings.size() == 1);
  CHECK(c.generation.stop_strings[0] == "\n\n");
  CHECK(c.checkpoint.save_steps == 500);  // default untouched (transformers' save_steps)
}

TEST_CASE("config: a misspelt key names file, line and the closest key") {
  auto path = write_temp_config("typo.toml", "[grpo]\nbeta = 0.0\nnum_generation = 4\n");
  std::string msg = error_of([&] { load_config(path.string()); });
  CHECK_THAT(msg, Catch::Contains("typo.toml:3"));
  CHECK_THAT(msg, Catch::Contains("unknown key grpo.num_generation"));
  CHECK_THAT(msg, Catch::Contains("did you mean grpo.num_generations?"));
}

TEST_CASE("config: a key in the wrong section suggests the right one") {
  auto path = write_temp_config("section.toml", "[train]\nnum_generations = 4\n");
  CHECK_THAT(error_of([&] { load_config(path.string()); }), Catch::Contains("did you mean grpo.num_generations?"));
  auto path2 = write_temp_config("section2.toml", "[gpro]\nbeta = 0.1\n");
  CHECK_THAT(error_of([&] { load_config(path2.string()); }), Catch::Contains("unknown section [gpro] (did you mean [grpo]?)"));
}

TEST_CASE("config: wrong types and ranges name key, value and what is allowed") {
  auto path = write_temp_config("type.toml", "[train]\nmax_steps = \"ten\"\n");
  std::string msg = error_of([&] { load_config(path.string()); });
  CHECK_THAT(msg, Catch::Contains("type.toml:2"));
  CHECK_THAT(msg, Catch::Contains("train.max_steps = 'ten'"));
  CHECK_THAT(msg, Catch::Contains("expected an integer >= 1"));
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.top_entropy_quantile=1.5"}); }),
             Catch::Contains("a number in [0, 1]"));
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.loss_type=ppo"}); }),
             Catch::Contains("one of grpo | bnpo | dr_grpo | dapo | cispo | sapo | luspo"));
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.mask_truncated_completions=1"}); }),
             Catch::Contains("true or false"));
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.num_generation=4"}); }),
             Catch::Contains("did you mean grpo.num_generations?"));
  CHECK_THAT(error_of([&] { config_from_overrides({"novalue"}); }), Catch::Contains("section.key=value"));
}

TEST_CASE("config: cross-field rules") {
  // TRL's rule: the generation batch of all ranks is a whole number of groups (a group may span ranks)
  const Config six_by_four = config_from_overrides({"train.per_device_train_batch_size=6", "grpo.num_generations=4"});
  CHECK_THAT(error_of([&] { check_batch_geometry(six_by_four, 1); }), Catch::Contains("multiple of grpo.num_generations"));
  CHECK_NOTHROW(check_batch_geometry(six_by_four, 2));
  CHECK_NOTHROW(check_batch_geometry(config_from_overrides({"train.per_device_train_batch_size=6", "grpo.num_generations=3"}), 1));
  CHECK_NOTHROW(check_batch_geometry(config_from_overrides({"train.per_device_train_batch_size=6",
                                                            "train.gradient_accumulation_steps=2", "grpo.num_generations=4"}), 1));
  // generation_batch_size as TRL: steps_per_generation = it / (per_device x ranks), and not both
  const Config by_generation_batch =
      config_from_overrides({"train.per_device_train_batch_size=4", "grpo.generation_batch_size=16", "grpo.num_generations=4"});
  CHECK(by_generation_batch.effective_steps_per_generation(2) == 2);
  CHECK(by_generation_batch.effective_steps_per_generation(1) == 4);
  CHECK_THAT(error_of([&] { check_batch_geometry(by_generation_batch, 3); }), Catch::Contains("multiple of train.per_device_train_batch_size"));
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.generation_batch_size=16", "grpo.steps_per_generation=2"}); }),
             Catch::Contains("cannot both be set"));
  // scale_rewards = true / false as TRL maps them
  CHECK(config_from_overrides({"grpo.scale_rewards=true"}).grpo.scale_rewards == ScaleRewards::Group);
  CHECK(config_from_overrides({"grpo.scale_rewards=false"}).grpo.scale_rewards == ScaleRewards::None);
  CHECK(config_from_overrides({"model.dtype=float64"}).model.dtype == ModelDtype::Float64);
  CHECK_THAT(error_of([&] { config_from_overrides({"reward.reward_weights=[1.0, 2.0]"}); }),
             Catch::Contains("one weight per function"));
  CHECK_THAT(error_of([&] { config_from_overrides({"reward.functions=[\"lenght\"]"}); }),
             Catch::Contains("unknown reward function"));
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.sync_ref_model=true"}); }), Catch::Contains("grpo.beta > 0"));
}

TEST_CASE("config: TOML syntax errors name file and line") {
  auto path = write_temp_config("syntax.toml", "[grpo]\nbeta = = 1\n");
  CHECK_THAT(error_of([&] { load_config(path.string()); }), Catch::Contains("syntax.toml:2"));
  CHECK_THAT(error_of([&] { load_config("/nonexistent/x.toml"); }), Catch::Contains("/nonexistent/x.toml"));
}

TEST_CASE("config: show round-trips through load") {
  Config c = config_from_overrides({"grpo.num_generations=8", "generation.top_p=0.9", "reward.reward_weights=[2.0]"});
  auto path = write_temp_config("shown.toml", config_to_toml(c));
  Config back = load_config(path.string());
  CHECK(config_to_toml(back) == config_to_toml(c));
  CHECK(config_hash(back) == config_hash(c));
  CHECK(config_hash(back) != config_hash(Config{}));
  // keys that do not change what generation produces leave the hash alone
  Config other_lr = c;
  other_lr.optim.learning_rate = 0.5;
  CHECK(config_hash(other_lr) == config_hash(c));
}

TEST_CASE("config: every key in code is documented in docs/config.md") {
  const std::string docs = read_text_file(fs::path(RAYLESS_SOURCE_DIR) / "docs" / "config.md");
  for (const ConfigField& f : config_fields()) {
    INFO(f.name);
    CHECK(docs.find("| `" + f.name + "` |") != std::string::npos);
  }
  // and the documented required names exist under those names
  for (const char* name : {"train.max_steps", "train.seed", "checkpoint.save_steps", "grpo.num_generations",
                           "grpo.num_iterations", "grpo.top_entropy_quantile"}) {
    bool found = false;
    for (const ConfigField& f : config_fields()) found = found || f.name == name;
    CHECK(found);
  }
}
