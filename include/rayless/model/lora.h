// LoRA adapters on the decoder's linear layers, as PEFT's LoraModel makes them (lora.* in the config):
// which layers, the scaling, the base frozen, the reference model as the base with adapters off, and
// merging. Each adapter lives in its projection (projection.h), whose forward adds it; PEFT's files
// are read and written by hf/peft_adapter.h.
#pragma once
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

// Every projection of the model with its module name ("model.layers.0.self_attn.q_proj").
std::vector<std::pair<std::string, ProjectionImpl*>> projections_of(const CausalLM& model);
// The last part of a module name ("q_proj"): the name target_modules matches.
std::string leaf_name(const std::string& module);

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

// Folds every adapter into its base weight (W += scaling * B A) and removes the adapters: the model is
// then a plain HF model again (rayless export --merge).
void merge_lora_adapters(CausalLM& model);

}  // namespace rayless
