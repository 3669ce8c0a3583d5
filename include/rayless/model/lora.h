// LoRA adapters on the decoder's linear layers, as PEFT's LoraModel makes them (lora.* in the config):
// which layers, the scaling, the base frozen, the reference model as the base with adapters off, and
// PEFT's file format (adapter_config.json + adapter_model.safetensors) both ways.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "rayless/model/model.h"

namespace rayless {

struct LoraSettings {
  int64_t r = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  std::vector<std::string> target_modules{"q_proj", "v_proj"};  // or {"all-linear"}
  bool use_rslora = false;
  double scaling() const;  // alpha / r, or alpha / sqrt(r) with use_rslora (PEFT)
};

// Adds an adapter to every projection whose module name matches a target (PEFT's rule: the name is
// the target or ends with "." + target; "all-linear" = every linear layer except the output head),
// and freezes every other parameter. Adapters of a 16-bit base are float32 (PEFT's
// autocast_adapter_dtype). Returns the adapted module names. InputError naming a target that matches
// no layer, listing the layers there are. Seeded: every rank makes the same adapters.
std::vector<std::string> add_lora_adapters(CausalLM& model, const LoraSettings& settings, uint64_t seed);
bool has_lora_adapters(const CausalLM& model);

// The base model alone while it lives (a LoRA run's reference model: no second copy in memory).
class AdaptersDisabled {
 public:
  explicit AdaptersDisabled(CausalLM& model);
  ~AdaptersDisabled();
  AdaptersDisabled(const AdaptersDisabled&) = delete;
  AdaptersDisabled& operator=(const AdaptersDisabled&) = delete;

 private:
  CausalLM& model_;
};

// PEFT's files. write_lora_adapter writes adapter_config.json and adapter_model.safetensors into dir
// (created if needed, each file atomically), tensor names
// "base_model.model.<module>.lora_A.weight". base_model: adapter_config's base_model_name_or_path.
void write_lora_adapter(const CausalLM& model, const LoraSettings& settings, const std::string& base_model,
                        const std::filesystem::path& dir);
bool is_lora_adapter_directory(const std::filesystem::path& dir);  // holds adapter_config.json
// adapter_config.json -> settings and base_model_name_or_path; InputError naming the file and key.
LoraSettings read_lora_config(const std::filesystem::path& dir, std::string* base_model = nullptr);
// Adds the adapters dir describes (when the model has none) and loads their weights; InputError for
// a missing, unexpected or mis-shaped tensor, naming the file.
void load_lora_adapter(CausalLM& model, const std::filesystem::path& dir);
// Folds every adapter into its base weight (W += scaling * B A) and removes the adapters: the model is
// then a plain HF model again (rayless export --merge).
void merge_lora_adapters(CausalLM& model);

}  // namespace rayless
