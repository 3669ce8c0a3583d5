#include "rayless/model/lora.h"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "rayless/base/error.h"
#include "rayless/base/hash.h"

namespace rayless {

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

std::vector<std::pair<std::string, ProjectionImpl*>> projections_of(const CausalLM& model) {
  std::vector<std::pair<std::string, ProjectionImpl*>> out;
  for (const auto& item : model->named_modules("", false))
    if (auto* p = item.value()->as<ProjectionImpl>()) out.emplace_back(item.key(), p);
  return out;
}

std::string leaf_name(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

double LoraSettings::scaling() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

std::vector<std::string> add_lora_adapters(CausalLM& model, const LoraSettings& settings, uint64_t seed) {
  inputCheck(settings.r >= 1, "lora.r = ", settings.r, " must be at least 1");
  inputCheck(!settings.target_modules.empty(), "lora.target_modules is empty: name layers (e.g. q_proj) or \"all-linear\"");
  const auto projections = projections_of(model);
  std::set<std::string> layer_kinds;
  for (const auto& [name, p] : projections) layer_kinds.insert(leaf_name(name));
  std::vector<std::string> adapted;
  std::set<std::string> matched_targets;
  for (const auto& [name, p] : projections) {
    bool match = false;
    for (const std::string& target : settings.target_modules)
      if (target == "all-linear" || name == target || ends_with(name, "." + target)) {
        match = true;
        matched_targets.insert(target);
      }
    if (match) adapted.push_back(name);
  }
  for (const std::string& target : settings.target_modules)
    if (!matched_targets.count(target)) {
      std::string kinds;
      for (const auto& k : layer_kinds) kinds += (kinds.empty() ? "" : ", ") + k;
      throw InputError(str("lora.target_modules: \"", target, "\" matches no linear layer of this ",
                           model->config().model_type, " model (its linear layers: ", kinds, "; or \"all-linear\")"));
    }
  for (auto& p : model->parameters()) p.set_requires_grad(false);  // the base is frozen
  const torch::Dtype base = model->dtype();
  const torch::Dtype adapter_dtype = (base == torch::kBFloat16 || base == torch::kHalf) ? torch::kFloat32 : base;
  for (const auto& [name, p] : projections)
    if (std::find(adapted.begin(), adapted.end(), name) != adapted.end())
      p->add_lora(settings.r, settings.scaling(), settings.dropout, adapter_dtype, fnv1a64(name.data(), name.size(), seed));
  return adapted;
}

bool has_lora_adapters(const CausalLM& model) {
  for (const auto& [name, p] : projections_of(model))
    if (p->has_lora()) return true;
  return false;
}

AdaptersDisabled::AdaptersDisabled(CausalLM& model) : model_(model) {
  for (const auto& [name, p] : projections_of(model_)) p->lora_active = false;
}
AdaptersDisabled::~AdaptersDisabled() {
  for (const auto& [name, p] : projections_of(model_)) p->lora_active = true;
}

void merge_lora_adapters(CausalLM& model) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : projections_of(model))
    if (p->has_lora() && p->lora_active) {
      p->weight.add_(p->lora_delta());
      p->lora_active = false;  // the base now holds the adapter; hf_state() leaves adapters out
    }
}

}  // namespace rayless
