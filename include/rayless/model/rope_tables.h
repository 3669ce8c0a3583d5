// Rotary position embeddings: the RoPE scaling types of transformers (default, linear, dynamic NTK,
// llama3, yarn) read from config.json's rope_scaling / rope_parameters, and the cos/sin tables.
#pragma once
#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <string>

namespace rayless {

enum class RopeType { Default, Linear, Dynamic, Llama3, Yarn };

// What config.json says about RoPE, standardized as transformers does: `rope_scaling` (when a
// non-empty object) replaces `rope_parameters`; `rope_type` wins over the older `type`; the dict's
// `rope_theta` wins over the top-level one.
struct RopeConfig {
  RopeType type = RopeType::Default;
  double theta = 10000.0;
  double factor = 1.0;                        // linear, dynamic, llama3, yarn
  int64_t original_max_position_embeddings = 0;  // llama3, yarn (dynamic scales past max_position_embeddings)
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;   // yarn: the ramp between extrapolated and interpolated bands
  bool truncate = true;                       // yarn: round the ramp's ends to whole dimensions
  double attention_factor = 1.0;              // multiplies cos and sin (yarn)

  // Unsupported types or values -> InputError naming `where`, the key and the value.
  static RopeConfig from_config_json(const nlohmann::json& config, int64_t max_position_embeddings,
                                     const std::string& where);
  static const char* name(RopeType type);
};

struct RotaryTables {  // cos/sin [B, T, D] in the compute dtype
  torch::Tensor cos, sin;
  // a packed pass's tables at its tokens, [N, 1, D], gathered once for every layer (so backward keeps
  // one copy, not one per layer); undefined elsewhere
  torch::Tensor packed_cos, packed_sin;
};

// Dynamic NTK's state within one KV-cached generation, as transformers keeps it on the model: the
// length its frequencies were last sized for; it grows when a call reaches past it and resets when a
// call is shorter than the original length.
struct DynamicRopeState {
  int64_t cached_length = 0;   // 0: not started (= max_position_embeddings)
  int64_t positions_seen = 0;  // max position + 1 over every row the batch held so far
};

class RotaryEmbedding {
 public:
  RotaryEmbedding(RopeConfig config, int64_t head_dim, int64_t max_position_embeddings);

  // cos/sin for position_ids [B, T]. `state` (a generation's cache) makes dynamic scaling follow
  // transformers' generate step by step; without it each call is sized on its own positions, as a
  // freshly loaded transformers model is.
  RotaryTables tables(const torch::Tensor& position_ids, torch::Dtype dtype, DynamicRopeState* state = nullptr) const;
  const RopeConfig& config() const { return config_; }

  // Inverse frequencies [D/2] (float32, CPU) for a sequence of `length` (only dynamic depends on it).
  torch::Tensor inverse_frequencies(int64_t length) const;

 private:
  int64_t scaled_length(const torch::Tensor& position_ids, DynamicRopeState* state) const;
  torch::Tensor frequencies_on(const torch::Tensor& position_ids, int64_t length) const;

  RopeConfig config_;
  int64_t head_dim_, max_position_embeddings_;
  mutable torch::Tensor cached_;  // inverse frequencies for cached_length_, on the last device used
  mutable int64_t cached_length_ = -1;
};

}  // namespace rayless
