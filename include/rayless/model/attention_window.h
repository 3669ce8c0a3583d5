// Sliding-window attention: which layers use a window (read from config.json as transformers does for
// each family) and the boolean masks that say which keys each query may see.
#pragma once
#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rayless {

struct AttentionLayout {
  // A query in column i of a sliding layer sees key columns i - sliding_window < j <= i (itself and
  // the sliding_window - 1 before it), as transformers' masking_utils; 0 = no window anywhere.
  int64_t sliding_window = 0;
  std::vector<bool> sliding;  // per layer

  bool any_sliding() const;
  // qwen2/qwen3: use_sliding_window, sliding_window, max_window_layers or an explicit layer_types;
  // mistral: sliding_window on every layer; llama: none. Unsupported values -> InputError naming
  // `where`, the key and the value.
  static AttentionLayout from_config_json(const nlohmann::json& config, const std::string& model_type,
                                          int64_t num_layers, const std::string& where);
};

// bool [B, 1, T, S] masks (true = may attend) for T new queries after `past` cached positions:
// causal and not padding, and within the window for `sliding` (undefined when window is 0). Every
// query may see itself, so that rows of padding never become all-masked (NaN); their outputs are
// ignored anyway. Columns count as positions: left-padded rows hold their tokens contiguously.
struct AttentionMasks {
  torch::Tensor full, sliding;
  const torch::Tensor& for_layer(const AttentionLayout& layout, size_t layer) const {
    return layout.sliding[layer] ? sliding : full;
  }
};
AttentionMasks attention_masks(const torch::Tensor& padding_mask, int64_t past, int64_t t, int64_t window);

}  // namespace rayless
