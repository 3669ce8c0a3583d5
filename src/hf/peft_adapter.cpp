// PEFT's adapter files; see include/rayless/hf/peft_adapter.h.
#include "rayless/hf/peft_adapter.h"

#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <set>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/hf/safetensors.h"

namespace fs = std::filesystem;

namespace rayless {

namespace {
constexpr const char* kPeftPrefix = "base_model.model.";  // PEFT's LoraModel wraps the HF model twice
}  // namespace

void write_lora_adapter(const CausalLM& model, const LoraSettings& settings, const std::string& base_model,
                        const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::set<std::string> kinds;
  for (const auto& [name, p] : projections_of(model))
    if (p->has_lora()) {
      tensors.emplace_back(kPeftPrefix + name + ".lora_A.weight", p->lora_A->weight.detach());
      tensors.emplace_back(kPeftPrefix + name + ".lora_B.weight", p->lora_B->weight.detach());
      kinds.insert(leaf_name(name));
    }
  runtimeCheck(!tensors.empty(), "write_lora_adapter: the model has no adapters");
  save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  nlohmann::json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"r", settings.r},
      {"lora_alpha", settings.alpha},
      {"lora_dropout", settings.dropout},
      {"target_modules", std::vector<std::string>(kinds.begin(), kinds.end())},
      {"use_rslora", settings.use_rslora},
      {"use_dora", false},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"revision", nullptr},
  };
  write_text_atomically(dir / "adapter_config.json", config.dump(2) + "\n");
}

bool is_lora_adapter_directory(const fs::path& dir) { return fs::exists(dir / "adapter_config.json"); }

LoraSettings read_lora_config(const fs::path& dir, std::string* base_model) {
  const fs::path file = dir / "adapter_config.json";
  const std::string where = file.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(where, ": not valid JSON (", e.what(), ")"));
  }
  inputCheck(j.is_object(), where, ": expected a JSON object");
  auto refuse_if = [&](bool bad, const std::string& key, const std::string& why) {
    inputCheck(!bad, where, ": ", key, " = ", j.value(key, nlohmann::json()).dump(), " is not supported (", why, ")");
  };
  try {
    inputCheck(j.value("peft_type", std::string()) == "LORA", where, ": peft_type is ",
               j.value("peft_type", nlohmann::json()).dump(), ", rayless reads LORA adapters");
    LoraSettings s;
    inputCheck(j.contains("r") && j["r"].is_number_integer() && j["r"].get<int64_t>() >= 1, where,
               ": r must be an integer >= 1, got ", j.value("r", nlohmann::json()).dump());
    s.r = j["r"].get<int64_t>();
    s.alpha = j.value("lora_alpha", 8.0);
    s.dropout = j.value("lora_dropout", 0.0);
    s.use_rslora = j.value("use_rslora", false);
    const nlohmann::json& targets = j.contains("target_modules") ? j["target_modules"] : nlohmann::json();
    if (targets.is_string()) {
      inputCheck(targets.get<std::string>() == "all-linear", where, ": target_modules \"", targets.get<std::string>(),
                 "\" is a regular expression; rayless reads a list of names or \"all-linear\"");
      s.target_modules = {"all-linear"};
    } else {
      inputCheck(targets.is_array() && !targets.empty(), where, ": target_modules must be a non-empty list of names");
      s.target_modules = targets.get<std::vector<std::string>>();
    }
    refuse_if(j.value("use_dora", false), "use_dora", "DoRA");
    refuse_if(j.value("fan_in_fan_out", false), "fan_in_fan_out", "Conv1D layers");
    refuse_if(j.value("bias", std::string("none")) != "none", "bias", "trained biases");
    refuse_if(j.contains("modules_to_save") && !j["modules_to_save"].is_null() && !j["modules_to_save"].empty(),
              "modules_to_save", "fully trained extra modules");
    refuse_if(j.contains("layers_to_transform") && !j["layers_to_transform"].is_null(), "layers_to_transform",
              "adapters on some layers only");
    refuse_if(j.contains("rank_pattern") && !j["rank_pattern"].empty(), "rank_pattern", "per-layer ranks");
    refuse_if(j.contains("alpha_pattern") && !j["alpha_pattern"].empty(), "alpha_pattern", "per-layer alphas");
    auto set = [&](const char* key) { return j.contains(key) && !j[key].is_null() && !(j[key].is_array() && j[key].empty()); };
    refuse_if(j.value("lora_bias", false), "lora_bias", "adapter biases");
    refuse_if(set("exclude_modules"), "exclude_modules", "excluded layers");
    refuse_if(set("layer_replication"), "layer_replication", "replicated layers");
    refuse_if(set("trainable_token_indices"), "trainable_token_indices", "trained embedding rows");
    refuse_if(set("target_parameters"), "target_parameters", "adapters on parameters");
    if (base_model) *base_model = j.value("base_model_name_or_path", std::string());
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(where, ": ", e.what()));
  }
}

void load_lora_adapter(CausalLM& model, const fs::path& dir) {
  const LoraSettings settings = read_lora_config(dir);
  if (!has_lora_adapters(model)) add_lora_adapters(model, settings, 0);
  const fs::path file = dir / "adapter_model.safetensors";
  inputCheck(fs::exists(file), dir.string(), ": no adapter_model.safetensors");
  const auto tensors = load_safetensors(file);
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : projections_of(model)) {
    if (!p->has_lora()) continue;
    for (auto [suffix, layer] : {std::pair{".lora_A.weight", p->lora_A.ptr()}, std::pair{".lora_B.weight", p->lora_B.ptr()}}) {
      const std::string key = kPeftPrefix + name + suffix;
      auto found = tensors.find(key);
      inputCheck(found != tensors.end(), file.string(), ": missing tensor ", key, " (the adapter was made for other layers)");
      torch::Tensor& weight = layer->weight;
      inputCheck(found->second.sizes() == weight.sizes(), file.string(), ": tensor ", key, " has shape ",
                 found->second.sizes(), ", this model's adapter needs ", weight.sizes(), " (r = ", settings.r, ")");
      weight.copy_(found->second.to(weight.scalar_type()));
      used.insert(key);
    }
  }
  for (const auto& [key, tensor] : tensors)
    inputCheck(used.count(key), file.string(), ": unexpected tensor ", key, " (no such adapted layer in this model)");
}

}  // namespace rayless
