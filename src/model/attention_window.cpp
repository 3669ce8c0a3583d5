// Sliding-window attention layouts and masks; see include/rayless/model/attention_window.h.
#include "rayless/model/attention_window.h"

#include <optional>

#include "rayless/base/error.h"

namespace rayless {

namespace {

constexpr int64_t kDefaultSlidingWindow = 4096;  // Qwen2Config / Qwen3Config / MistralConfig default
constexpr int64_t kDefaultMaxWindowLayers = 28;  // Qwen2Config / Qwen3Config default

bool has(const nlohmann::json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// sliding_window as transformers reads it: absent -> the config class default, null -> none.
int64_t window_field(const nlohmann::json& j, const std::string& where) {
  if (!j.contains("sliding_window")) return kDefaultSlidingWindow;
  if (j["sliding_window"].is_null()) return 0;
  inputCheck(j["sliding_window"].is_number_integer() && j["sliding_window"].get<int64_t>() > 0, where,
             ": sliding_window must be a positive integer or null");
  return j["sliding_window"].get<int64_t>();
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!has(j, key)) return false;
  inputCheck(j[key].is_boolean(), where, ": field \"", key, "\" must be true or false");
  return j[key].get<bool>();
}

// layer_types when present: sliding_attention / full_attention, one per layer.
std::optional<std::vector<bool>> explicit_layer_types(const nlohmann::json& j, int64_t num_layers, const std::string& where) {
  if (!has(j, "layer_types")) return std::nullopt;
  const auto& types = j["layer_types"];
  inputCheck(types.is_array() && static_cast<int64_t>(types.size()) == num_layers, where,
             ": layer_types must list one type per layer (", num_layers, ")");
  std::vector<bool> sliding;
  for (size_t i = 0; i < types.size(); ++i) {
    const bool known = types[i] == "full_attention" || types[i] == "sliding_attention";
    inputCheck(known, where, ": layer_types[", i, "] = ", types[i].dump(),
               " is not supported (supported: full_attention, sliding_attention)");
    sliding.push_back(types[i] == "sliding_attention");
  }
  return sliding;
}

}  // namespace

bool AttentionLayout::any_sliding() const {
  for (bool s : sliding)
    if (s) return true;
  return false;
}

AttentionLayout AttentionLayout::from_config_json(const nlohmann::json& j, const std::string& model_type,
                                                  int64_t num_layers, const std::string& where) {
  AttentionLayout layout;
  layout.sliding.assign(static_cast<size_t>(num_layers), false);
  const auto types = explicit_layer_types(j, num_layers, where);
  if (model_type == "mistral") {
    // MistralForCausalLM applies sliding_window (when set) to every layer and ignores layer_types
    layout.sliding_window = window_field(j, where);
    layout.sliding.assign(static_cast<size_t>(num_layers), layout.sliding_window > 0);
    if (types)
      for (size_t i = 0; i < types->size(); ++i)
        inputCheck((*types)[i] == layout.sliding[i], where, ": layer_types[", i, "] = ", j["layer_types"][i].dump(),
                   " is not supported for mistral (transformers applies sliding_window to every layer)");
    return layout;
  }
  const bool use_window = bool_field(j, "use_sliding_window", where);
  if (model_type == "llama") {  // LlamaForCausalLM has no sliding window
    inputCheck(!use_window, where, ": use_sliding_window = true is not supported for llama");
    if (types)
      for (size_t i = 0; i < types->size(); ++i)
        inputCheck(!(*types)[i], where, ": layer_types[", i, "] = \"sliding_attention\" is not supported for llama");
    return layout;
  }
  // qwen2 / qwen3: the window exists only with use_sliding_window; layer_types, when not given, puts
  // it on layers from max_window_layers on
  layout.sliding_window = use_window ? window_field(j, where) : 0;
  if (types) {
    layout.sliding = *types;
  } else if (layout.sliding_window > 0) {
    int64_t first = kDefaultMaxWindowLayers;
    if (has(j, "max_window_layers")) {
      inputCheck(j["max_window_layers"].is_number_integer(), where, ": max_window_layers must be an integer");
      first = j["max_window_layers"].get<int64_t>();
    }
    for (int64_t i = std::max<int64_t>(first, 0); i < num_layers; ++i) layout.sliding[static_cast<size_t>(i)] = true;
  }
  if (layout.any_sliding())
    inputCheck(layout.sliding_window > 0, where,
               ": layer_types has sliding_attention layers but there is no window (use_sliding_window = ",
               use_window ? "true" : "false", ", sliding_window = ", has(j, "sliding_window") ? j["sliding_window"].dump() : "absent", ")");
  return layout;
}

AttentionMasks attention_masks(const torch::Tensor& padding_mask, int64_t past, int64_t t, int64_t window) {
  const int64_t b = padding_mask.size(0), s = past + t;
  const auto real = padding_mask.to(torch::kBool);
  AttentionMasks masks;
  if (t == 1) {  // one new token (decoding): all earlier real keys, and itself
    masks.full = real.view({b, 1, 1, s}).clone();
    masks.full.select(3, past).fill_(true);
    if (window > 0) {
      masks.sliding = masks.full.clone();
      masks.sliding.narrow(3, 0, std::max<int64_t>(s - window, 0)).fill_(false);
    }
    return masks;
  }
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(padding_mask.device());
  const auto query_pos = torch::arange(past, s, opts).view({t, 1});
  const auto key_pos = torch::arange(0, s, opts).view({1, s});
  const auto causal = key_pos <= query_pos;
  const auto itself = (key_pos == query_pos).unsqueeze(0);
  masks.full = ((causal.unsqueeze(0) & real.unsqueeze(1)) | itself).unsqueeze(1);
  if (window > 0) masks.sliding = masks.full & (key_pos > query_pos - window).view({1, 1, t, s});
  return masks;
}

}  // namespace rayless
