// `rayless-bench init-model`: builds a model from an HF config.json, initialises it from a seed and saves a
// complete HF directory (weights, configs, tokenizer). Two tools that load this directory start from
// bit-identical weights, which is what a side-by-side benchmark (tools/bench/) needs.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/base/files.h"
#include "rayless/hf/model_directory.h"
#include "rayless/model/model.h"
#include "rayless/hf/tokenizer.h"

namespace rayless::cli {

namespace fs = std::filesystem;

int init_model(const Args& args) {
  po::options_description options("rayless-bench init-model (vocab_size, eos_token_id and pad_token_id default to the tokenizer's)");
  std::string config_json, out_dir, tokenizer_path = "byte";
  uint64_t seed = 1234;
  options.add_options()
      ("config-json", po::value(&config_json)->required(), "HF config.json describing the architecture")
      ("out", po::value(&out_dir)->required(), "directory to create (must not exist)")
      ("seed", po::value(&seed)->default_value(seed), "seed of the random initialisation")
      ("tokenizer", po::value(&tokenizer_path)->default_value(tokenizer_path),
       "\"byte\" or a tokenizer.json to save with the model");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench init-model --config-json FILE --out DIR [--seed S] [--tokenizer byte|FILE]",
                     options, vm))
    return kExitOk;

  inputCheck(!fs::exists(out_dir), "init-model: ", out_dir, " already exists (choose a new --out directory)");
  nlohmann::json raw = read_json_file(config_json);
  inputCheck(raw.is_object(), config_json, ": expected a JSON object");

  const auto tokenizer = load_tokenizer(tokenizer_path);
  // The special ids come from the tokenizer unless the config names them, so generation stops where
  // the tokenizer says a completion ends in both rayless and transformers.
  const auto eos = tokenizer->eos_ids();
  if (!raw.contains("eos_token_id") && !eos.empty()) raw["eos_token_id"] = eos.front();
  if (!raw.contains("pad_token_id")) raw["pad_token_id"] = tokenizer->pad_id();
  // vocab_size may be left to the tokenizer, so the model has exactly the ids the tokenizer knows.
  if (!raw.contains("vocab_size") || raw["vocab_size"].is_null()) raw["vocab_size"] = tokenizer->vocab_size();

  const ModelArchConfig arch = ModelArchConfig::from_json(raw, config_json);
  inputCheck(tokenizer->vocab_size() <= arch.vocab_size, config_json, ": vocab_size ", arch.vocab_size,
             " is smaller than the tokenizer's ", tokenizer->vocab_size(), " ids (", tokenizer_path, ")");

  CausalLM model(arch);
  model->init_weights(seed);
  save_hf_directory(model, tokenizer.get(), out_dir);
  std::cout << "init-model: " << out_dir << " (" << arch.model_type << ", " << arch.num_parameters()
            << " parameters, seed " << seed << ", tokenizer " << tokenizer->kind() << ")" << std::endl;
  return kExitOk;
}

}  // namespace rayless::cli
