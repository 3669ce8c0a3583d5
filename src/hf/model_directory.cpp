// HF model directories in and out. Loading builds the module from config.json and copies tensors in
// by name; saving writes the same names, so transformers reads what rayless wrote.
#include "rayless/hf/model_directory.h"

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/hf/safetensors.h"

namespace rayless {

CausalLM load_hf_model(const std::filesystem::path& dir, torch::Dtype dtype, torch::Device device, uint64_t init_seed) {
  ModelArchConfig config = load_model_config(dir);
  CausalLM model(config);
  if (has_safetensors(dir)) {
    model->load_state(load_safetensors_directory(dir), dir.string());
  } else {
    model->init_weights(init_seed);
  }
  model->to(device, dtype);
  return model;
}

namespace {
std::string dtype_name(torch::Dtype dtype) {
  if (dtype == torch::kBFloat16) return "bfloat16";
  if (dtype == torch::kFloat16) return "float16";
  if (dtype == torch::kFloat64) return "float64";
  return "float32";
}
}  // namespace

void write_hf_files(const CausalLM& model, const Tokenizer* tokenizer, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const ModelArchConfig& c = model->config();
  nlohmann::json config = c.to_json();
  config["torch_dtype"] = dtype_name(model->dtype());
  if (tokenizer && !config.contains("eos_token_id")) config["eos_token_id"] = tokenizer->eos_ids().front();
  save_safetensors(dir / "model.safetensors", model->hf_state(), {{"format", "pt"}});
  nlohmann::json generation = nlohmann::json::object();
  if (c.bos_token_id) generation["bos_token_id"] = *c.bos_token_id;
  if (tokenizer) {
    generation["eos_token_id"] = tokenizer->eos_ids();
    generation["pad_token_id"] = tokenizer->pad_id();
  } else if (!c.eos_token_ids.empty()) {
    generation["eos_token_id"] = c.eos_token_ids;
  }
  write_text_atomically(dir / "generation_config.json", generation.dump(2) + "\n");
  if (tokenizer) {
    write_text_atomically(dir / "tokenizer.json", tokenizer->to_json());
    // the fast tokenizer class reads tokenizer.json; this names the pad token for transformers
    nlohmann::json tc = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                         {"pad_token", tokenizer->decode({tokenizer->pad_id()})},
                         {"eos_token", tokenizer->decode({tokenizer->eos_ids().front()})}};
    write_text_atomically(dir / "tokenizer_config.json", tc.dump(2) + "\n");
  }
  // config.json last: a directory with config.json but stale weights cannot be mistaken for complete
  write_text_atomically(dir / "config.json", config.dump(2) + "\n");
}

void save_hf_directory(const CausalLM& model, const Tokenizer* tokenizer, const std::filesystem::path& dir) {
  write_directory_atomically(dir, [&](const std::filesystem::path& tmp) { write_hf_files(model, tokenizer, tmp); });
}

}  // namespace rayless
