// The policy: a decoder-only transformer for Qwen2/Qwen2.5, Qwen3, Llama and Mistral-style models, built
// from an HF config.json. Parameter names equal the HF state dict (model.layers.N.self_attn.q_proj.weight,
// ..., lm_head.weight), so loading and saving are a name-for-name mapping.
#pragma once
#include "rayless/base/choices.h"
#include "rayless/model/attention_window.h"
#include "rayless/model/projection.h"
#include "rayless/model/rope_tables.h"
#include "rayless/ops/ops.h"
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace rayless {

// The architecture fields of config.json that the model uses, validated.
struct ModelArchConfig {
  std::string model_type;  // qwen2 | qwen3 | llama | mistral
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;                  // rope_scaling / rope_parameters, rope_theta
  AttentionLayout attention;        // sliding-window layers
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // q/k/v bias (always on for qwen2, never for mistral)
  bool o_proj_bias = false;         // llama/qwen3: = attention_bias; qwen2, mistral: never
  bool qk_norm = false;             // qwen3
  double initializer_range = 0.02;
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::vector<int64_t> eos_token_ids;
  nlohmann::json raw;               // the file as read, written back on save

  // Unknown model_type or an unsupported field/value -> InputError naming `where` and the field.
  static ModelArchConfig from_json(const nlohmann::json& json, const std::string& where);
  nlohmann::json to_json() const;   // raw with the fields above written back
  int64_t num_parameters() const;
};
ModelArchConfig load_model_config(const std::filesystem::path& model_dir);  // <dir>/config.json

// Keys and values of every layer for incremental decoding; grows along time as tokens are appended.
struct KVCache {
  std::vector<torch::Tensor> keys, values;  // per layer [B, H_kv, capacity, D]
  int64_t length = 0;                       // positions filled
  int64_t capacity_hint = 0;                // preallocate this many positions on first use (0 = exact)
  // Dynamic RoPE's state through one generation. Each forward with this cache counts as advancing
  // every row the cache ever held by its width, as rows stay in transformers' generate batch after
  // they finish (here select_rows may drop them).
  DynamicRopeState rope_state;
  // Slot mode (the generation engine, CausalLMImpl::forward_slots): keys and values are preallocated
  // [slots, H_kv, max_len, D], each row holding one sequence from position 0. A step of B rows and T
  // tokens writes row b's keys and values at positions write_positions[b] ([B] or [B, T]) of slot b and
  // attends to the first attend_length positions; `length` is unused. Undefined write_positions: append
  // mode.
  torch::Tensor write_positions;  // [B] int64 on the cache's device
  int64_t attend_length = 0;
  // Appends [B, H_kv, T, D] for `layer`, returns the filled keys/values [B, H_kv, length + T, D] (in
  // slot mode: writes T = 1 token per row, returns [B, H_kv, attend_length, D]).
  std::pair<torch::Tensor, torch::Tensor> append(size_t layer, const torch::Tensor& k, const torch::Tensor& v);
  // Keeps only rows `index` (e.g. repeating prompts for several generations).
  void select_rows(const torch::Tensor& index);
};

// One part of a packed pass as the attention sees it: its tokens' slots b * positions + i in a
// [rows, positions] grid, and this layer's mask over the grid, [rows or 1, 1, positions, past + positions].
struct PackedGrid {
  torch::Tensor token_index, mask;
  int64_t rows = 0, positions = 0;
};

// The pass that shares prompts (CausalLMImpl::forward_hidden_sharing_prompts) as each layer sees it:
// the tokens are the prompts' then the completions'; completion row b attends to the keys and values
// of prompt row row_prompts[b] (its whole grid row) before its own.
struct SharedPromptLayout {
  PackedGrid prompts, completions;
  torch::Tensor row_prompts;  // [B]
  torch::Tensor cos, sin;     // the rotary tables at every token, [Np + Nc, 1, D]
};

// The input of forward_hidden_sharing_prompts. Positions may be undefined: then counted from the
// masks, as forward_hidden counts them (a completion continues its prompt).
struct SharedPromptBatch {
  torch::Tensor prompt_ids, prompt_mask, prompt_positions;  // [U, P], left-padded
  torch::Tensor prompt_index;                               // [Np]: the real prompt tokens' slots in [U, P]
  torch::Tensor completion_ids, completion_positions;       // [B, T]
  torch::Tensor attention_mask;    // [B, P + T]: the row's prompt's mask, then 1 at its real completion tokens
  torch::Tensor completion_index;  // [Nc]: the computed completion slots in [B, T]
  torch::Tensor row_prompts;       // [B]: the prompt each row continues
};

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelArchConfig& c);
  // mask: bool [B, 1, T, S] (true = may attend), S = past + T. x is [B, T, H], or, when token_index
  // (flat positions of [B, T]) is defined, [N, H] holding only those positions: the projections then
  // run on the N tokens alone and only the attention itself sees a padded layout: the keys and values
  // the [B, T] grid, the queries their length bucket's where the ops attend in buckets (ops.h).
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope, const torch::Tensor& mask,
                        KVCache* cache, size_t layer_index, const torch::Tensor& token_index = {});
  // x [Np + Nc, H]: the prompts' tokens and the completions', attended as `layout` says.
  torch::Tensor forward_sharing_prompts(const torch::Tensor& x, const SharedPromptLayout& layout);
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  int64_t num_heads, num_kv_heads, head_dim;
  // q/k/v as one projection, and o, set only while a FusedGenerationWeights is alive and used only when
  // no gradient is taken (copies, not parameters: not part of the state dict)
  ops::GenerationLinear generation_qkv, generation_o;

 private:
  // q, k, v [N, heads, D] of the tokens x [N, H] (or x [B, T, H] flattened), q/k norms applied
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project(const torch::Tensor& x);
  // the attention of packed queries q [N, heads, D] (rotary applied) to keys and values in the grid's
  // padded layout [rows, H_kv, past + positions, D]; [N, heads * D]
  torch::Tensor attend_packed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const PackedGrid& grid) const;
  // one attention call on the padded layout, queries q [rows, heads, positions, D] too: [rows,
  // positions, heads * D], or [N, heads * D] at the grid's packed tokens when it has any
  torch::Tensor attend_padded(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const PackedGrid& grid) const;
  double scale() const;  // 1 / sqrt(head_dim)
  torch::Tensor output(const torch::Tensor& attended);  // o_proj
};
TORCH_MODULE(Attention);

// down(silu(gate) * up) for a pass with gradients, keeping only gate, up and the down weight for
// backward (ops::silu_times_down): gradients bit for bit those of down(ops::silu_times(gate, up)).
// Undefined when it does not apply (an adapter or a bias on down, and as ops.h says); then call them apart.
torch::Tensor silu_times_down(const torch::Tensor& gate, const torch::Tensor& up, const Projection& down);

class MLPImpl : public torch::nn::Module {
 public:
  explicit MLPImpl(const ModelArchConfig& c);
  torch::Tensor forward(const torch::Tensor& x);
  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  ops::GenerationLinear generation_gate_up, generation_down;  // as AttentionImpl::generation_qkv
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const ModelArchConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope, const torch::Tensor& mask,
                        KVCache* cache, size_t layer_index, const torch::Tensor& token_index = {});
  torch::Tensor forward_sharing_prompts(const torch::Tensor& x, const SharedPromptLayout& layout);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

// "model" in the HF state dict: embeddings, layers, final norm.
class DecoderImpl : public torch::nn::Module {
 public:
  explicit DecoderImpl(const ModelArchConfig& c);
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(Decoder);

class CausalLMImpl : public torch::nn::Module {
 public:
  explicit CausalLMImpl(ModelArchConfig config);

  // Final-normed hidden states [B, T, H]. input_ids [B, T] (left-padded); attention_mask [B, S] with
  // S = cache length + T (1 = real token; undefined = all ones); position_ids [B, T] (undefined =
  // cumsum(mask) - 1 over the whole mask, as transformers does). With a cache the new keys/values are
  // appended to it (differentiably: a cache built with grad enabled carries gradients back to the
  // pass that filled it). token_index (int64, flat positions of [B, T]) computes only those positions
  // and returns [N, H] in that order; positions left out are neither computed nor appended to a cache
  // in any usable way, so leave out only positions no later token needs (padding, the tail).
  torch::Tensor forward_hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                               const torch::Tensor& position_ids = {}, KVCache* cache = nullptr,
                               const torch::Tensor& token_index = {});
  // The packed pass over distinct prompts and the completions that continue them, in one pass: each
  // prompt computed once, its keys and values shared with its completions (as forward_hidden's prompt
  // pass with a cache, then the completions' pass on that cache, computes them) while every projection
  // runs once over all tokens. Returns [Np + Nc, H]: the prompt tokens' final-normed hidden states
  // (prompt_index's order), then the completions' (completion_index's). No cache, no checkpointing.
  torch::Tensor forward_hidden_sharing_prompts(const SharedPromptBatch& batch);
  // One decode step of the generation engine on a cache in slot mode (KVCache::write_positions): token
  // input_ids[b] [B] at position positions[b] [B] (int64, on the model's device) of slot b, attending to
  // keys at positions <= its own (and within the window on sliding layers) among the cache's first
  // attend_length. Returns the final-normed hidden states [B, H]. Fixed shapes for fixed B and
  // attend_length, no host synchronisation (but dynamic RoPE's length, read from the positions).
  // With input_ids and positions [B, T]: T tokens per row, each attending to its row's keys up to its
  // own position (the earlier ones of the step included), returning [B, T, H]; a row with fewer tokens
  // pads at positions past its last, whose keys a later step overwrites before it reads them.
  torch::Tensor forward_slots(const torch::Tensor& input_ids, const torch::Tensor& positions, KVCache& cache);
  torch::Tensor logits(const torch::Tensor& hidden);  // hidden @ lm_head_weight^T, [.., V]
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});  // logits
  torch::Tensor lm_head_weight() const;  // [V, H]; the embedding when tied

  const RotaryEmbedding& rotary() const { return rotary_; }

  // Recompute each layer in backward instead of keeping its activations (training only).
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  // HF init: normal(0, initializer_range) for linear and embedding weights, zero biases, unit norms.
  void init_weights(uint64_t seed);
  // name-for-name copy from an HF state dict (dtype converted). Missing or mis-shaped tensors and
  // unknown names are InputErrors naming `where`.
  void load_state(const std::map<std::string, torch::Tensor>& tensors, const std::string& where);
  // The HF state dict (lm_head.weight left out when tied, as transformers saves it).
  std::vector<std::pair<std::string, torch::Tensor>> hf_state() const;

  const ModelArchConfig& config() const { return config_; }
  torch::Dtype dtype() const;
  torch::Device device() const;

  Decoder model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied

 private:
  ModelArchConfig config_;
  RotaryEmbedding rotary_;
  bool gradient_checkpointing_ = false;
};
TORCH_MODULE(CausalLM);

// The dtype generation's projections compute in: the autocast dtype when autocast is on for the
// model's device (train.bf16 turns it on around generation, as TRL's autocast does) and the weights
// are float32; else the weights' dtype.
torch::ScalarType generation_compute_dtype(const CausalLM& model);

// While alive, every layer of `model` computes q/k/v with one matmul and gate/up with another, from
// copies of the weights taken at construction in generation_compute_dtype(model), laid out for the
// backend's kernel (ops::GenerationLinear); passes with gradients enabled keep the separate weights. It costs one copy of the layers' weights (in that dtype) while it lives. The copies do not
// follow later updates: hold it only while the weights are fixed (one generation). Does nothing for a
// model with LoRA adapters (an adapter adds to its own projection's output).
class FusedGenerationWeights {
 public:
  explicit FusedGenerationWeights(CausalLM& model);
  ~FusedGenerationWeights();
  FusedGenerationWeights(const FusedGenerationWeights&) = delete;
  FusedGenerationWeights& operator=(const FusedGenerationWeights&) = delete;

 private:
  CausalLM model_;
};

// Names of LoRA adapter tensors ("...q_proj.lora_A.weight"): not part of the HF state dict.
bool is_lora_parameter(const std::string& name);
// The parameters that require gradients, in module order (with LoRA: the adapters alone).
std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module);

// Position ids as transformers computes them from a left-padded mask: cumsum(mask) - 1, 1 at padding.
torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask);
torch::Dtype torch_dtype_of(ModelDtype dtype);

// Pads prompts on the left: ids [B, P] and mask [B, P] (int64).
std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id);

}  // namespace rayless
