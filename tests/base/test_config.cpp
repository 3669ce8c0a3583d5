#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include "rayless/base/config.h"
#include "rayless/base/config_paths.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"

namespace fs = std::filesystem;
using namespace rayless;

namespace {
fs::path write_temp_config(const std::string& name, const std::string& text) {
  fs::path dir = fs::temp_directory_path() / "rayless-test-config";
  fs::create_directories(dir);
  fs::path path = dir / name;
  fs::create_directories(path.parent_path());
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
  CHECK_THAT(error_of([&] { config_from_overrides({"grpo.logprob_sequence_chunk_size=-1"}); }),
             Catch::Contains("grpo.logprob_sequence_chunk_size = -1") && Catch::Contains("expected an integer >= 0"));
  auto products = write_temp_config("products.toml", "[train]\nbf16 = true\nbf16_products = \"fast\"\n");
  msg = error_of([&] { load_config(products.string()); });
  CHECK_THAT(msg, Catch::Contains("products.toml:3"));
  CHECK_THAT(msg, Catch::Contains("train.bf16_products = 'fast'"));
  CHECK_THAT(msg, Catch::Contains("one of auto | bfloat16 | float32"));
  CHECK(config_from_overrides({"train.bf16_products=float32"}).train.bf16_products == "float32");
  CHECK(config_from_overrides({}).train.bf16_products == "auto");
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

TEST_CASE("config: named reward tables: workers and reward models by name, round trip through config show") {
  auto path = write_temp_config("named.toml",
                                "[reward]\nfunctions = [\"length\", \"judge\", \"rm\"]\nreward_weights = [1.0, 0.5, 2.0]\n"
                                "[reward.workers.judge]\ncommand = \"python3 judge.py\"\ntimeout_s = 12.5\nbatch_size = 4\n"
                                "[reward.models.rm]\npath = \"models/rm\"\nbatch_size = 16\n");
  const Config c = load_config(path.string());
  REQUIRE(c.reward.workers.size() == 1);
  CHECK(c.reward.workers.at("judge").command == "python3 judge.py");
  CHECK(c.reward.workers.at("judge").timeout_s == 12.5);
  CHECK(c.reward.workers.at("judge").batch_size == 4);
  CHECK(c.reward.models.at("rm").path == (path.parent_path() / "models/rm").string());  // beside the file
  CHECK(c.reward.models.at("rm").batch_size == 16);
  // config.resolved.toml reads back to the same config
  const auto resolved = write_temp_config("named-resolved.toml", config_to_toml(c));
  CHECK(config_hash(load_config(resolved.string())) == config_hash(c));
  // --set reaches the named tables too
  const Config o = config_from_overrides({"reward.functions=[\"length\",\"judge\"]", "reward.workers.judge.command=\"x\""});
  CHECK(o.reward.workers.at("judge").command == "x");
}

TEST_CASE("config: named reward tables: each mistake is one line naming the table") {
  auto error_for = [](const std::string& text) {
    return error_of([&] { load_config(write_temp_config("bad-named.toml", text).string()); });
  };
  CHECK_THAT(error_for("[reward]\nfunctions = [\"length\", \"judge\"]\n"),
             Catch::Contains("unknown reward function \"judge\": not a built-in") && Catch::Contains("[reward.workers.judge]"));
  CHECK_THAT(error_for("[reward]\nfunctions = [\"length\"]\n[reward.workers.judge]\ncommand = \"x\"\n"),
             Catch::Contains("[reward.workers.judge] is defined but reward.functions does not name \"judge\""));
  CHECK_THAT(error_for("[reward]\nfunctions = [\"judge\"]\n[reward.workers.judge]\ntimeout_s = 3\n"),
             Catch::Contains("[reward.workers.judge] has no command"));
  CHECK_THAT(error_for("[reward]\nfunctions = [\"judge\"]\n[reward.workers.judge]\ncommand = \"x\"\ncomand = \"y\"\n"),
             Catch::Contains("bad-named.toml:5") && Catch::Contains("unknown key reward.workers.judge.comand"));
  CHECK_THAT(error_for("[reward]\nfunctions = [\"length\"]\n[reward.models.length]\npath = \"x\"\n"),
             Catch::Contains("is a built-in reward"));
  CHECK_THAT(error_for("[reward]\nfunctions = [\"rm\"]\n[reward.models.rm]\nbatch_size = 2\n"),
             Catch::Contains("[reward.models.rm] has no path"));
}

TEST_CASE("config: TRL's names at the wrong place point at the rayless key") {
  CHECK_THAT(error_of([] { load_config(write_temp_config("flat.toml", "num_generations = 4\n").string()); }),
             Catch::Contains("unknown top-level key num_generations") && Catch::Contains("grpo.num_generations"));
  CHECK_THAT(error_of([] { load_config(write_temp_config("lr.toml", "[grpo]\nlearning_rate = 1e-6\n").string()); }),
             Catch::Contains("did you mean optim.learning_rate?"));
  CHECK_THAT(error_of([] { load_config(write_temp_config("tb.toml", "[log]\nreport_to = \"tensorboard\"\n").string()); }),
             Catch::Contains("TRL's report_to is log.tensorboard here"));
}

TEST_CASE("config: floats print as the shortest text that reads back the same") {
  Config c;
  c.optim.learning_rate = 1e-6;
  c.grpo.epsilon = 0.2;
  c.distributed.collective_timeout_s = 300;
  const std::string text = config_to_toml(c);
  CHECK_THAT(text, Catch::Contains("learning_rate = 1e-06") && Catch::Contains("epsilon = 0.2\n") &&
                       Catch::Contains("collective_timeout_s = 300.0"));
}

TEST_CASE("config: a relative path in the file is relative to the file's directory, one from --set or a default to the working one") {
  const auto path = write_temp_config("paths/run.toml",
                                      "[model]\npath = \"models/m\"\n"
                                      "[tokenizer]\npath = \"../t/tokenizer.json\"\nchat_template = \"templates/chat.jinja\"\n"
                                      "[data]\npath = \"./d/p.jsonl\"\n"
                                      "[eval]\npath = \"/abs/eval.jsonl\"\n"
                                      "[train]\noutput_dir = \"runs/x\"\nreplay_rollouts = \"r.jsonl\"\n"
                                      "[reward]\nfunctions = [\"rm\"]\n[reward.models.rm]\npath = \"rm\"\ntokenizer = \"rm/tokenizer.json\"\n");
  const Config c = load_config(path.string());
  const fs::path dir = path.parent_path();
  const auto beside = [&](const char* relative) { return (dir / relative).lexically_normal().string(); };
  CHECK(c.model.path == beside("models/m"));
  CHECK(c.tokenizer.path == beside("../t/tokenizer.json"));
  CHECK(c.tokenizer.chat_template == beside("templates/chat.jinja"));
  CHECK(c.data.path == beside("d/p.jsonl"));
  CHECK(c.eval.path == "/abs/eval.jsonl");  // absolute stays
  CHECK(c.train.output_dir == beside("runs/x"));
  CHECK(c.train.replay_rollouts == beside("r.jsonl"));
  CHECK(c.reward.models.at("rm").path == beside("rm"));
  CHECK(c.reward.models.at("rm").tokenizer == beside("rm/tokenizer.json"));

  // values that are not paths stay as written; keys the file leaves out keep their defaults
  const auto words = write_temp_config("paths/words.toml", "[tokenizer]\npath = \"byte\"\nchat_template = \"chatml\"\n");
  const Config w = load_config(words.string());
  CHECK(w.tokenizer.path == "byte");
  CHECK(w.tokenizer.chat_template == "chatml");
  CHECK(w.model.path == (fs::current_path() / Config{}.model.path).string());  // the default, from here
  CHECK(w.data.path == (fs::current_path() / Config{}.data.path).string());
  const auto inline_template = write_temp_config("paths/inline.toml", "[tokenizer]\nchat_template = \"{{ x }}.jinja\"\n");
  CHECK(load_config(inline_template.string()).tokenizer.chat_template == "{{ x }}.jinja");

  // --set is a command line: relative to the working directory
  const Config o = load_config(path.string(), {"data.path=mine.jsonl", "model.path=\"m2\"", "eval.path=/e.jsonl"});
  CHECK(o.data.path == (fs::current_path() / "mine.jsonl").string());
  CHECK(o.model.path == (fs::current_path() / "m2").string());
  CHECK(o.eval.path == "/e.jsonl");
  CHECK(o.train.output_dir == beside("runs/x"));
}

TEST_CASE("config: missing_config_paths names every path key that names nothing, one line each") {
  const fs::path dir = write_temp_config("present/data.jsonl", "{}\n").parent_path();
  fs::create_directories(dir / "model");
  const auto path = write_temp_config("present/c.toml",
                                      "[model]\npath = \"model\"\n[data]\npath = \"data.jsonl\"\n[train]\noutput_dir = \"not-yet\"\n");
  CHECK(missing_config_paths(load_config(path.string())).empty());  // the output directory need not exist

  const auto bad = write_temp_config("present/bad.toml",
                                     "[model]\npath = \"data.jsonl\"\n[data]\npath = \"model\"\n"
                                     "[eval]\npath = \"gone.jsonl\"\n[tokenizer]\npath = \"byte\"\n");
  const std::vector<std::string> problems = missing_config_paths(load_config(bad.string()));
  REQUIRE(problems.size() == 3);
  CHECK(problems[0] == "model.path = \"" + (dir / "data.jsonl").string() + "\": not a directory");
  CHECK(problems[1] == "data.path = \"" + (dir / "model").string() + "\": a directory, not a file");
  CHECK(problems[2] == "eval.path = \"" + (dir / "gone.jsonl").string() + "\": no such file");
}
