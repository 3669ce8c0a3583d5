// The decoder: Qwen2 / Qwen3 / Llama / Mistral share one code path; the differences are flags read from
// config.json (q/k/v bias, q/k norms, tied embeddings, sliding-window layers). Numerics follow
// transformers: RMSNorm and RoPE tables computed in float32 and cast back, positions = cumsum(mask) - 1.
#include "rayless/model/model.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <set>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/model/lora.h"
#include "rayless/ops/autocast_scope.h"

namespace rayless {

// ---- config ------------------------------------------------------------------------------------

namespace {

// Keys of config.json that describe things this implementation either reads or may safely ignore
// (bookkeeping of transformers, generation defaults, labels).
const std::set<std::string>& ignorable_config_keys() {
  static const std::set<std::string> keys = {
      "architectures", "torch_dtype", "dtype", "transformers_version", "use_cache", "bos_token_id",
      "eos_token_id", "pad_token_id", "output_attentions", "output_hidden_states", "return_dict",
      "id2label", "label2id", "problem_type", "tokenizer_class", "is_encoder_decoder", "is_decoder",
      "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward", "prefix", "task_specific_params",
      "finetuning_task", "torchscript", "pruned_heads", "cross_attention_hidden_size", "decoder_start_token_id",
      "sep_token_id", "max_window_layers", "sliding_window", "attention_dropout", "hidden_act", "mlp_bias",
      "pretraining_tp", "use_sliding_window", "layer_types", "rope_scaling", "rope_parameters", "head_dim",
      "max_position_embeddings", "initializer_range", "tie_word_embeddings", "attention_bias", "rms_norm_eps",
      "rope_theta", "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "use_return_dict", "output_scores", "return_dict_in_generate",
      "bad_words_ids", "num_beams", "do_sample", "temperature", "top_p", "top_k", "repetition_penalty",
      "max_length", "min_length", "diversity_penalty", "length_penalty", "no_repeat_ngram_size",
      "num_return_sequences", "early_stopping", "typical_p", "num_beam_groups", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
      "begin_suppress_tokens", "encoder_no_repeat_ngram_size", "tf_legacy_loss", "use_bfloat16",
      "partial_rotary_factor"};
  return keys;
}

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where, std::optional<int64_t> fallback = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    inputCheck(fallback.has_value(), where, ": missing required field \"", key, "\"");
    return *fallback;
  }
  inputCheck(j[key].is_number_integer(), where, ": field \"", key, "\" must be an integer");
  return j[key].get<int64_t>();
}

double get_float(const nlohmann::json& j, const char* key, const std::string& where, double fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  inputCheck(j[key].is_number(), where, ": field \"", key, "\" must be a number");
  return j[key].get<double>();
}

bool get_bool(const nlohmann::json& j, const char* key, const std::string& where, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  inputCheck(j[key].is_boolean(), where, ": field \"", key, "\" must be true or false");
  return j[key].get<bool>();
}

std::optional<int64_t> get_optional_id(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (j[key].is_array()) {  // some configs list several; the first is the canonical one
    if (j[key].empty()) return std::nullopt;
    inputCheck(j[key][0].is_number_integer(), where, ": field \"", key, "\" must hold integers");
    return j[key][0].get<int64_t>();
  }
  inputCheck(j[key].is_number_integer(), where, ": field \"", key, "\" must be an integer");
  return j[key].get<int64_t>();
}

}  // namespace

ModelArchConfig ModelArchConfig::from_json(const nlohmann::json& j, const std::string& where) {
  inputCheck(j.is_object(), where, ": config.json must be a JSON object");
  ModelArchConfig c;
  c.raw = j;
  inputCheck(j.contains("model_type") && j["model_type"].is_string(), where, ": missing \"model_type\"");
  c.model_type = j["model_type"].get<std::string>();
  inputCheck(c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "llama" || c.model_type == "mistral",
             where, ": unsupported model_type \"", c.model_type, "\" (supported: qwen2, qwen3, llama, mistral)");
  for (auto it = j.begin(); it != j.end(); ++it) {
    inputCheck(ignorable_config_keys().count(it.key()) || it.key().rfind('_', 0) == 0, where,
               ": unsupported field \"", it.key(), "\" for model_type ", c.model_type);
  }
  c.vocab_size = get_int(j, "vocab_size", where);
  c.hidden_size = get_int(j, "hidden_size", where);
  c.intermediate_size = get_int(j, "intermediate_size", where);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", where);
  c.num_attention_heads = get_int(j, "num_attention_heads", where);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", where, c.num_attention_heads);
  inputCheck(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0 &&
                 c.num_attention_heads > 0 && c.num_key_value_heads > 0,
             where, ": sizes must be positive");
  inputCheck(c.num_attention_heads % c.num_key_value_heads == 0, where, ": num_attention_heads (", c.num_attention_heads,
             ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  const bool explicit_head_dim = j.contains("head_dim") && !j["head_dim"].is_null();
  if (!explicit_head_dim)
    inputCheck(c.hidden_size % c.num_attention_heads == 0, where, ": hidden_size must be a multiple of num_attention_heads");
  c.head_dim = get_int(j, "head_dim", where, c.hidden_size / c.num_attention_heads);
  inputCheck(c.head_dim > 0 && c.head_dim % 2 == 0, where, ": head_dim must be positive and even");
  c.max_position_embeddings = get_int(j, "max_position_embeddings", where, 32768);
  c.rms_norm_eps = get_float(j, "rms_norm_eps", where, 1e-6);
  c.rope = RopeConfig::from_config_json(j, c.max_position_embeddings, where);
  c.attention = AttentionLayout::from_config_json(j, c.model_type, c.num_hidden_layers, where);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", where, false);
  c.initializer_range = get_float(j, "initializer_range", where, 0.02);
  if (c.model_type == "qwen2") {
    c.attention_bias = true;  // Qwen2 always has q/k/v biases and no o_proj bias
    c.o_proj_bias = false;
  } else if (c.model_type == "mistral") {  // MistralAttention has no biases and no attention_bias field
    inputCheck(!get_bool(j, "attention_bias", where, false), where, ": attention_bias = true is not supported for mistral");
  } else {
    c.attention_bias = get_bool(j, "attention_bias", where, false);
    c.o_proj_bias = c.attention_bias;
  }
  c.qk_norm = c.model_type == "qwen3";
  const std::string act = j.contains("hidden_act") && j["hidden_act"].is_string() ? j["hidden_act"].get<std::string>() : "silu";
  inputCheck(act == "silu", where, ": unsupported hidden_act \"", act, "\" (supported: silu)");
  inputCheck(!get_bool(j, "mlp_bias", where, false), where, ": unsupported field value mlp_bias = true");
  inputCheck(get_int(j, "pretraining_tp", where, 1) == 1, where, ": unsupported pretraining_tp != 1");
  inputCheck(get_float(j, "attention_dropout", where, 0.0) == 0.0, where, ": unsupported attention_dropout != 0");
  c.bos_token_id = get_optional_id(j, "bos_token_id", where);
  c.pad_token_id = get_optional_id(j, "pad_token_id", where);
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    if (j["eos_token_id"].is_array()) {
      for (const auto& e : j["eos_token_id"]) {
        inputCheck(e.is_number_integer(), where, ": eos_token_id must hold integers");
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(get_int(j, "eos_token_id", where));
    }
  }
  return c;
}

nlohmann::json ModelArchConfig::to_json() const {
  nlohmann::json j = raw.is_object() ? raw : nlohmann::json::object();
  j["model_type"] = model_type;
  const std::map<std::string, std::string> architectures = {
      {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}, {"llama", "LlamaForCausalLM"},
      {"mistral", "MistralForCausalLM"}};
  if (!j.contains("architectures")) j["architectures"] = {architectures.at(model_type)};
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_hidden_layers;
  j["num_attention_heads"] = num_attention_heads;
  j["num_key_value_heads"] = num_key_value_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope.theta;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["initializer_range"] = initializer_range;
  j["hidden_act"] = "silu";
  if (model_type == "llama" || model_type == "qwen3") j["attention_bias"] = attention_bias;
  return j;
}

int64_t ModelArchConfig::num_parameters() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t per_layer = hidden_size * (q + 2 * kv) + q * hidden_size + 3 * hidden_size * intermediate_size + 2 * hidden_size;
  if (attention_bias) per_layer += q + 2 * kv;
  if (o_proj_bias) per_layer += hidden_size;
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t total = vocab_size * hidden_size + num_hidden_layers * per_layer + hidden_size;
  if (!tie_word_embeddings) total += vocab_size * hidden_size;
  return total;
}

ModelArchConfig load_model_config(const std::filesystem::path& model_dir) {
  const auto file = model_dir / "config.json";
  inputCheck(std::filesystem::exists(file), model_dir.string(), ": not a model directory (no config.json)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(file.string(), ": invalid JSON: ", e.what()));
  }
  return ModelArchConfig::from_json(j, file.string());
}

torch::Dtype torch_dtype_of(ModelDtype dtype) {
  switch (dtype) {
    case ModelDtype::BFloat16: return torch::kBFloat16;
    case ModelDtype::Float16: return torch::kFloat16;
    case ModelDtype::Float64: return torch::kFloat64;
    default: return torch::kFloat32;
  }
}

std::pair<torch::Tensor, torch::Tensor> left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t pad_id) {
  size_t width = 0;
  for (const auto& p : prompts) width = std::max(width, p.size());
  const int64_t b = static_cast<int64_t>(prompts.size());
  auto ids = torch::full({b, static_cast<int64_t>(width)}, pad_id, torch::kLong);
  auto mask = torch::zeros({b, static_cast<int64_t>(width)}, torch::kLong);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const auto& p = prompts[i];
    const size_t offset = width - p.size();
    for (size_t j = 0; j < p.size(); ++j) {
      ids_a[i][offset + j] = p[j];
      mask_a[i][offset + j] = 1;
    }
  }
  return {ids, mask};
}

// ---- KV cache ----------------------------------------------------------------------------------

std::pair<torch::Tensor, torch::Tensor> KVCache::append(size_t layer, const torch::Tensor& k, const torch::Tensor& v) {
  if (write_positions.defined()) {  // slot mode: each row's tokens at the row's own positions
    const int64_t rows = k.size(0), tokens = k.size(2);
    runtimeCheck(layer < keys.size() && keys[layer].size(0) >= rows && write_positions.numel() == rows * tokens,
                 "KVCache: slot mode writes ", rows, " x ", tokens, " tokens at as many positions of a preallocated cache");
    auto kc = keys[layer].narrow(0, 0, rows), vc = values[layer].narrow(0, 0, rows);
    const auto index = write_positions.view({rows, 1, tokens, 1}).expand({rows, k.size(1), tokens, k.size(3)});
    kc.scatter_(2, index, k.to(kc.scalar_type()));
    vc.scatter_(2, index, v.to(vc.scalar_type()));
    return {kc.narrow(2, 0, attend_length), vc.narrow(2, 0, attend_length)};
  }
  if (keys.size() <= layer) {
    keys.resize(layer + 1);
    values.resize(layer + 1);
  }
  const int64_t t = k.size(2);
  const int64_t start = length;  // `length` advances once per forward, after the last layer
  torch::Tensor& kc = keys[layer];
  torch::Tensor& vc = values[layer];
  if (!kc.defined() || kc.size(2) < start + t) {
    const int64_t capacity = std::max(start + t, capacity_hint);
    // Under autocast the attention casts keys and values to the autocast dtype at every call: stored
    // in it, each token is cast once, as it arrives, rather than the whole cache at every step.
    const auto dtype = ops::autocast_compute_dtype(k.device().type(), k.scalar_type());
    auto grown_k = torch::empty({k.size(0), k.size(1), capacity, k.size(3)}, k.options().dtype(dtype));
    auto grown_v = torch::empty({v.size(0), v.size(1), capacity, v.size(3)}, v.options().dtype(dtype));
    if (kc.defined() && start > 0) {
      grown_k.narrow(2, 0, start).copy_(kc.narrow(2, 0, start));
      grown_v.narrow(2, 0, start).copy_(vc.narrow(2, 0, start));
    }
    kc = grown_k;
    vc = grown_v;
  }
  kc.narrow(2, start, t).copy_(k);
  vc.narrow(2, start, t).copy_(v);
  return {kc.narrow(2, 0, start + t), vc.narrow(2, 0, start + t)};
}

void KVCache::select_rows(const torch::Tensor& index) {
  for (auto& k : keys)
    if (k.defined()) k = k.index_select(0, index.to(k.device()));
  for (auto& v : values)
    if (v.defined()) v = v.index_select(0, index.to(v.device()));
}

// ---- layers ------------------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) { weight = register_parameter("weight", torch::ones({dim})); }

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return ops::rms_norm(x, weight, eps); }

namespace {
torch::Tensor apply_rope(const torch::Tensor& x, const RotaryTables& rope) {  // x [B, H, T, D]
  return ops::apply_rotary(x, rope.cos.unsqueeze(1), rope.sin.unsqueeze(1));
}
// A packed pass's attention runs in length buckets where the ops say so (ops::attends_in_buckets).
bool attends_in_buckets(const torch::Tensor& token_index, int64_t positions_per_row) {
  return token_index.defined() && ops::attends_in_buckets(token_index.device(), positions_per_row);
}
// The tables at the packed tokens (flat positions of [B, T]), unless already gathered.
RotaryTables packed_rotary_tables(const RotaryTables& rope, const torch::Tensor& token_index) {
  if (rope.packed_cos.defined()) return rope;
  const int64_t positions = rope.cos.size(0) * rope.cos.size(1), dim = rope.cos.size(2);
  RotaryTables out = rope;
  out.packed_cos = rope.cos.reshape({positions, dim}).index_select(0, token_index).unsqueeze(1);
  out.packed_sin = rope.sin.reshape({positions, dim}).index_select(0, token_index).unsqueeze(1);
  return out;
}
torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}
Projection projection(int64_t in, int64_t out, bool bias) { return Projection(in, out, bias); }
}  // namespace

AttentionImpl::AttentionImpl(const ModelArchConfig& c)
    : num_heads(c.num_attention_heads), num_kv_heads(c.num_key_value_heads), head_dim(c.head_dim) {
  q_proj = register_module("q_proj", projection(c.hidden_size, num_heads * head_dim, c.attention_bias));
  k_proj = register_module("k_proj", projection(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  v_proj = register_module("v_proj", projection(c.hidden_size, num_kv_heads * head_dim, c.attention_bias));
  o_proj = register_module("o_proj", projection(num_heads * head_dim, c.hidden_size, c.o_proj_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim, c.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim, c.rms_norm_eps));
  }
}

namespace {
// [N or rows * positions, heads, D] in the padded [rows, heads, positions, D] layout: packed tokens
// (token_index defined) go to their slots, zeros elsewhere
torch::Tensor to_padded(const torch::Tensor& projected, int64_t rows, int64_t positions, const torch::Tensor& token_index) {
  const int64_t heads = projected.size(1), dim = projected.size(2);
  if (!token_index.defined()) return projected.view({rows, positions, heads, dim}).transpose(1, 2);
  return torch::zeros({rows * positions, heads, dim}, projected.options())
      .index_copy(0, token_index, projected)
      .view({rows, positions, heads, dim})
      .transpose(1, 2);
}
}  // namespace

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> AttentionImpl::project(const torch::Tensor& x) {
  torch::Tensor q, k, v;
  if (generation_qkv.defined() && !torch::GradMode::is_enabled()) {
    auto qkv = generation_qkv(x).view({-1, num_heads + 2 * num_kv_heads, head_dim});
    q = qkv.narrow(1, 0, num_heads);
    k = qkv.narrow(1, num_heads, num_kv_heads);
    v = qkv.narrow(1, num_heads + num_kv_heads, num_kv_heads);
  } else {
    q = q_proj(x).view({-1, num_heads, head_dim});
    k = k_proj(x).view({-1, num_kv_heads, head_dim});
    v = v_proj(x).view({-1, num_kv_heads, head_dim});
  }
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  return {q, k, v};
}

torch::Tensor AttentionImpl::output(const torch::Tensor& attended) {
  return generation_o.defined() && !torch::GradMode::is_enabled() ? generation_o(attended) : o_proj(attended);
}

double AttentionImpl::scale() const { return 1.0 / std::sqrt(double(head_dim)); }

torch::Tensor AttentionImpl::attend_padded(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const PackedGrid& grid) const {
  // grouped-query attention (each kv head serves a group of query heads) inside the op
  const auto out = ops::padded_attention(q, k, v, grid.mask, scale(), num_kv_heads != num_heads);
  if (!grid.token_index.defined()) return out;
  return out.view({grid.rows * grid.positions, num_heads * head_dim}).index_select(0, grid.token_index);
}

torch::Tensor AttentionImpl::attend_packed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const PackedGrid& grid) const {
  // Rows of unequal length: the queries attended in buckets of like length, padded only to their
  // bucket's length.
  if (attends_in_buckets(grid.token_index, grid.positions))
    return ops::bucketed_attention(q, k, v, grid.mask, grid.token_index, scale(), num_kv_heads != num_heads,
                                   ops::kAttentionCallCost);
  return attend_padded(to_padded(q, grid.rows, grid.positions, grid.token_index), k, v, grid);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RotaryTables& rope, const torch::Tensor& mask,
                                     KVCache* cache, size_t layer_index, const torch::Tensor& token_index) {
  const int64_t b = rope.cos.size(0), t = rope.cos.size(1);
  torch::Tensor q, k, v;  // [N or B*T, heads, D]
  std::tie(q, k, v) = project(x);
  if (attends_in_buckets(token_index, t)) {
    // the rotary embedding on the packed tokens; the keys and values in the padded layout (for the
    // cache and the attention)
    const RotaryTables packed_rope = packed_rotary_tables(rope, token_index);
    q = ops::apply_rotary(q, packed_rope.packed_cos, packed_rope.packed_sin);
    k = to_padded(ops::apply_rotary(k, packed_rope.packed_cos, packed_rope.packed_sin), b, t, token_index);
    v = to_padded(v, b, t, token_index);
    if (cache) std::tie(k, v) = cache->append(layer_index, k, v);
    return output(attend_packed(q, k, v, PackedGrid{token_index, mask, b, t}));
  }
  if (t == 1 && !token_index.defined() && !torch::GradMode::is_enabled()) {
    std::tie(q, k) = ops::decode_rotary(q, k, rope.cos, rope.sin);  // a decode step
  } else {
    q = apply_rope(to_padded(q, b, t, token_index), rope);
    k = apply_rope(to_padded(k, b, t, token_index), rope);
  }
  v = to_padded(v, b, t, token_index);
  if (cache) std::tie(k, v) = cache->append(layer_index, k, v);
  return output(attend_padded(q, k, v, PackedGrid{token_index, mask, b, t}));
}

torch::Tensor AttentionImpl::forward_sharing_prompts(const torch::Tensor& x, const SharedPromptLayout& layout) {
  torch::Tensor q, k, v;
  std::tie(q, k, v) = project(x);
  q = ops::apply_rotary(q, layout.cos, layout.sin);
  k = ops::apply_rotary(k, layout.cos, layout.sin);
  const PackedGrid& prompts = layout.prompts;
  const PackedGrid& completions = layout.completions;
  const int64_t np = prompts.token_index.size(0), nc = x.size(0) - np;
  // keys and values padded and in the dtype the attention computes in (autocast would cast them at
  // each call to the same values), so that the completions' copies move half the bytes under autocast
  const auto as_cached = [](const torch::Tensor& projected, const PackedGrid& grid) {
    const auto padded = to_padded(projected, grid.rows, grid.positions, grid.token_index);
    return padded.to(ops::autocast_compute_dtype(padded.device().type(), padded.scalar_type()));
  };
  // the prompts' tokens, then the completions': one split each, whose backward joins the two parts'
  // gradients (two narrows would each spread theirs over a full-size zero tensor, then add the two)
  const auto q_parts = q.split_with_sizes({np, nc}), k_parts = k.split_with_sizes({np, nc}),
             v_parts = v.split_with_sizes({np, nc});
  const auto prompt_k = as_cached(k_parts[0], prompts), prompt_v = as_cached(v_parts[0], prompts);
  // each completion row: its prompt's keys and values, then its own
  const auto with_prompt = [&](const torch::Tensor& of_prompts, const torch::Tensor& own) {
    return torch::cat({of_prompts.index_select(0, layout.row_prompts), as_cached(own, completions)}, 2);
  };
  const auto completion_k = with_prompt(prompt_k, k_parts[1]);
  const auto completion_v = with_prompt(prompt_v, v_parts[1]);
  return output(torch::cat({attend_packed(q_parts[0], prompt_k, prompt_v, prompts),
                            attend_packed(q_parts[1], completion_k, completion_v, completions)},
                           0));
}

MLPImpl::MLPImpl(const ModelArchConfig& c) {
  gate_proj = register_module("gate_proj", projection(c.hidden_size, c.intermediate_size, false));
  up_proj = register_module("up_proj", projection(c.hidden_size, c.intermediate_size, false));
  down_proj = register_module("down_proj", projection(c.intermediate_size, c.hidden_size, false));
}

torch::Tensor silu_times_down(const torch::Tensor& gate, const torch::Tensor& up, const Projection& down) {
  // the product is recomputed from the plain down weight: no bias, no adapter
  if (down->bias.defined() || down->has_lora()) return {};
  return ops::silu_times_down(gate, up, down->weight);
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  if (generation_gate_up.defined() && !torch::GradMode::is_enabled())
    return generation_down(ops::decode_silu_times(generation_gate_up(x)));
  const auto gate = gate_proj(x);
  const auto up = up_proj(x);
  if (auto out = silu_times_down(gate, up, down_proj); out.defined()) return out;
  return down_proj(ops::silu_times(gate, up));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelArchConfig& c) {
  self_attn = register_module("self_attn", Attention(c));
  mlp = register_module("mlp", MLP(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryTables& rope, const torch::Tensor& mask,
                                        KVCache* cache, size_t layer_index, const torch::Tensor& token_index) {
  auto h = x + self_attn(input_layernorm(x), rope, mask, cache, layer_index, token_index);
  return h + mlp(post_attention_layernorm(h));
}

torch::Tensor DecoderLayerImpl::forward_sharing_prompts(const torch::Tensor& x, const SharedPromptLayout& layout) {
  auto h = x + self_attn->forward_sharing_prompts(input_layernorm(x), layout);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelArchConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c));
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

// ---- gradient checkpointing --------------------------------------------------------------------

namespace {
// Runs one layer without keeping its activations; backward recomputes it with grad enabled, under the
// autocast the forward ran in, and differentiates the recomputation (no dropout here, so
// recomputation is exact).
struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                                                torch::TensorList params, int64_t layer_address, torch::Tensor cos,
                                                torch::Tensor sin, torch::Tensor mask, torch::Tensor token_index_arg,
                                                bool packed) {
    // apply() takes no undefined tensors: dense layers get an empty placeholder and packed = false
    const torch::Tensor token_index = packed ? token_index_arg : torch::Tensor();
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(layer_address);
    ctx->saved_data["layer"] = layer_address;
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["mask"] = mask;
    ctx->saved_data["packed"] = packed;
    if (packed) ctx->saved_data["token_index"] = token_index;
    ctx->saved_data["num_params"] = static_cast<int64_t>(params.size());
    // backward runs after the caller's autocast scope has closed: the recomputation re-enters it
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(x.device().type());
    ctx->saved_data["autocast_dtype"] = static_cast<int64_t>(at::autocast::get_autocast_dtype(x.device().type()));
    ctx->save_for_backward({x});
    return {layer->forward(x, RotaryTables{cos, sin, {}, {}}, mask, nullptr, 0, token_index)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    const RotaryTables rope{ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), {}, {}};
    const auto mask = ctx->saved_data["mask"].toTensor();
    const torch::Tensor token_index =
        ctx->saved_data["packed"].toBool() ? ctx->saved_data["token_index"].toTensor() : torch::Tensor();
    const int64_t num_params = ctx->saved_data["num_params"].toInt();
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      ops::AutocastScope autocast(ctx->saved_data["autocast"].toBool(), x.device(),
                             static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
      out = layer->forward(x, rope, mask, nullptr, 0, token_index);
    }
    std::vector<torch::Tensor> inputs{x};
    for (auto& p : trainable_parameters(*layer)) inputs.push_back(p);  // as forward passed them
    auto grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    torch::autograd::variable_list result;
    result.push_back(grads[0]);
    for (int64_t i = 0; i < num_params; ++i) result.push_back(grads[1 + i]);
    for (int i = 0; i < 6; ++i) result.emplace_back();  // layer address, cos, sin, mask, token index, packed
    return result;
  }
};
}  // namespace

// ---- causal LM ---------------------------------------------------------------------------------

CausalLMImpl::CausalLMImpl(ModelArchConfig config)
    : config_(std::move(config)), rotary_(config_.rope, config_.head_dim, config_.max_position_embeddings) {
  model = register_module("model", Decoder(config_));
  if (!config_.tie_word_embeddings)
    lm_head = register_module("lm_head", linear(config_.hidden_size, config_.vocab_size, false));
}

torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask) {
  auto m = attention_mask.to(torch::kLong);
  return (m.cumsum(-1) - 1).masked_fill(m == 0, 1);
}

namespace {
// What the layers of a pass over a [rows, t] grid need besides the hidden states: each layer kind's
// mask and the rotary tables at the tokens' positions (position_ids, or counted from the mask over
// past + t as transformers does), gathered at the packed tokens `gather_at` when defined.
struct GridSetup {
  AttentionMasks masks;
  RotaryTables rope;
};
GridSetup grid_setup(const ModelArchConfig& config, const RotaryEmbedding& rotary, torch::Dtype dtype,
                     const torch::Tensor& attention_mask, const torch::Tensor& position_ids, int64_t past, int64_t t,
                     const torch::Tensor& gather_at, DynamicRopeState* rope_state = nullptr) {
  const AttentionLayout& layout = config.attention;
  GridSetup setup;
  setup.masks = attention_masks(attention_mask, past, t, layout.any_sliding() ? layout.sliding_window : 0);
  const auto positions = position_ids.defined() ? position_ids.to(attention_mask.device())
                                                : position_ids_from_mask(attention_mask).narrow(1, past, t);
  setup.rope = rotary.tables(positions, dtype, rope_state);
  if (gather_at.defined()) setup.rope = packed_rotary_tables(setup.rope, gather_at);
  return setup;
}
}  // namespace

torch::Tensor CausalLMImpl::forward_hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask_in,
                                           const torch::Tensor& position_ids_in, KVCache* cache,
                                           const torch::Tensor& token_index_in) {
  const int64_t b = input_ids.size(0), t = input_ids.size(1);
  const int64_t past = cache ? cache->length : 0;
  const auto device = input_ids.device();
  torch::Tensor attention_mask = attention_mask_in.defined()
                                     ? attention_mask_in.to(device)
                                     : torch::ones({b, past + t}, torch::TensorOptions().dtype(torch::kLong).device(device));
  runtimeCheck(attention_mask.size(0) == b && attention_mask.size(1) == past + t, "attention_mask is [",
               attention_mask.size(0), ", ", attention_mask.size(1), "], expected [", b, ", ", past + t, "]");
  const torch::Tensor token_index = token_index_in.defined() ? token_index_in.to(device) : token_index_in;
  auto h = token_index.defined() ? model->embed_tokens(input_ids.reshape({-1}).index_select(0, token_index))
                                 : model->embed_tokens(input_ids);
  const GridSetup setup = grid_setup(config_, rotary_, h.scalar_type(), attention_mask, position_ids_in, past, t,
                                     attends_in_buckets(token_index, t) ? token_index : torch::Tensor(),
                                     cache ? &cache->rope_state : nullptr);
  const AttentionLayout& layout = config_.attention;
  const AttentionMasks& masks = setup.masks;
  const RotaryTables& rope = setup.rope;
  const bool checkpoint = gradient_checkpointing_ && is_training() && torch::GradMode::is_enabled() && cache == nullptr;
  for (size_t i = 0; i < model->layers->size(); ++i) {
    auto layer = model->layers->ptr<DecoderLayerImpl>(i);
    const torch::Tensor& allowed = masks.for_layer(layout, i);
    if (checkpoint) {
      auto params = trainable_parameters(*layer);
      h = CheckpointedLayer::apply(h, torch::TensorList(params), reinterpret_cast<int64_t>(layer.get()), rope.cos, rope.sin, allowed,
                                   token_index.defined() ? token_index : torch::empty({0}, torch::kLong),
                                   token_index.defined())[0];
    } else {
      h = layer->forward(h, rope, allowed, cache, i, token_index);
    }
  }
  if (cache) cache->length += t;
  return model->norm(h);
}

torch::Tensor CausalLMImpl::forward_hidden_sharing_prompts(const SharedPromptBatch& batch) {
  const auto device = this->device();
  const auto on_device = [&](const torch::Tensor& t) { return t.defined() ? t.to(device) : t; };
  const int64_t U = batch.prompt_ids.size(0), P = batch.prompt_ids.size(1);
  const int64_t B = batch.completion_ids.size(0), T = batch.completion_ids.size(1);
  runtimeCheck(batch.prompt_mask.sizes() == batch.prompt_ids.sizes() && batch.attention_mask.size(0) == B &&
                   batch.attention_mask.size(1) == P + T && batch.row_prompts.numel() == B,
               "forward_hidden_sharing_prompts: prompts ", batch.prompt_ids.sizes(), ", completions ",
               batch.completion_ids.sizes(), ", attention_mask ", batch.attention_mask.sizes(), ", row_prompts ",
               batch.row_prompts.sizes());
  const auto prompt_index = on_device(batch.prompt_index), completion_index = on_device(batch.completion_index);
  auto h = model->embed_tokens(torch::cat({on_device(batch.prompt_ids).reshape({-1}).index_select(0, prompt_index),
                                           on_device(batch.completion_ids).reshape({-1}).index_select(0, completion_index)}));
  // the prompts' grid [U, P], then the completions' [B, T] after their prompts' P positions
  const GridSetup prompts = grid_setup(config_, rotary_, h.scalar_type(), on_device(batch.prompt_mask),
                                       batch.prompt_positions, 0, P, prompt_index);
  const GridSetup completions = grid_setup(config_, rotary_, h.scalar_type(), on_device(batch.attention_mask),
                                           batch.completion_positions, P, T, completion_index);
  SharedPromptLayout shared;
  shared.prompts = PackedGrid{prompt_index, {}, U, P};
  shared.completions = PackedGrid{completion_index, {}, B, T};
  shared.row_prompts = on_device(batch.row_prompts);
  shared.cos = torch::cat({prompts.rope.packed_cos, completions.rope.packed_cos});
  shared.sin = torch::cat({prompts.rope.packed_sin, completions.rope.packed_sin});
  const AttentionLayout& layout = config_.attention;
  for (size_t i = 0; i < model->layers->size(); ++i) {
    shared.prompts.mask = prompts.masks.for_layer(layout, i);
    shared.completions.mask = completions.masks.for_layer(layout, i);
    h = model->layers->ptr<DecoderLayerImpl>(i)->forward_sharing_prompts(h, shared);
  }
  return model->norm(h);
}

torch::Tensor CausalLMImpl::forward_slots(const torch::Tensor& input_ids, const torch::Tensor& positions,
                                          KVCache& cache) {
  const int64_t b = input_ids.size(0), t = input_ids.dim() == 2 ? input_ids.size(1) : 1;
  runtimeCheck(cache.attend_length > 0 && input_ids.dim() <= 2 && positions.numel() == b * t, "forward_slots: ", b,
               " x ", t, " tokens, ", positions.numel(), " positions, attend_length ", cache.attend_length);
  auto h = model->embed_tokens(input_ids.view({b, t}));
  const RotaryTables rope = rotary_.tables(positions.view({b, t}), h.scalar_type(), &cache.rope_state);
  // key j of slot b is visible to its query at position p when j <= p (and p - j < window on sliding
  // layers): the slot's own sequence from position 0, the new tokens written at their positions first
  const auto key_positions = torch::arange(cache.attend_length, positions.options()).view({1, 1, 1, -1});
  const auto query_positions = positions.view({b, 1, t, 1});
  AttentionMasks masks;
  masks.full = key_positions <= query_positions;
  const AttentionLayout& layout = config_.attention;
  if (layout.any_sliding()) masks.sliding = masks.full & (key_positions > query_positions - layout.sliding_window);
  cache.write_positions = positions;
  for (size_t i = 0; i < model->layers->size(); ++i)
    h = model->layers->ptr<DecoderLayerImpl>(i)->forward(h, rope, masks.for_layer(layout, i), &cache, i);
  cache.write_positions = torch::Tensor();
  return input_ids.dim() == 2 ? model->norm(h) : model->norm(h).reshape({b, -1});
}

torch::Tensor CausalLMImpl::lm_head_weight() const {
  return config_.tie_word_embeddings ? model->embed_tokens->weight : lm_head->weight;
}

torch::Tensor CausalLMImpl::logits(const torch::Tensor& hidden) {
  return ops::linear_as_autocast(hidden, lm_head_weight(), torch::Tensor());
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  return logits(forward_hidden(input_ids, attention_mask));
}

torch::Dtype CausalLMImpl::dtype() const { return model->embed_tokens->weight.scalar_type(); }
torch::Device CausalLMImpl::device() const { return model->embed_tokens->weight.device(); }

void CausalLMImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double std = config_.initializer_range;
  for (auto& item : named_parameters(true)) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const bool is_norm = name.find("norm.weight") != std::string::npos;
    torch::Tensor fresh;
    if (is_norm) {
      fresh = torch::ones(p.sizes());
    } else if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      fresh = torch::zeros(p.sizes());
    } else {
      fresh = torch::empty(p.sizes()).normal_(0.0, std, generator);
    }
    p.copy_(fresh.to(p.dtype()));
  }
}

void CausalLMImpl::load_state(const std::map<std::string, torch::Tensor>& tensors, const std::string& where) {
  torch::NoGradGuard no_grad;
  auto params = named_parameters(true);
  for (const auto& [name, tensor] : tensors) {
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;   // a buffer older transformers saved
    if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;  // tied: the embedding is the head
    inputCheck(params.contains(name), where, ": unexpected tensor ", name, " for a ", config_.model_type, " model");
  }
  for (auto& item : params) {
    if (is_lora_parameter(item.key())) continue;  // adapters load from their own files (lora.h)
    auto found = tensors.find(item.key());
    inputCheck(found != tensors.end(), where, ": missing tensor ", item.key());
    inputCheck(found->second.sizes() == item.value().sizes(), where, ": tensor ", item.key(), " has shape ",
               found->second.sizes(), ", the config needs ", item.value().sizes());
    item.value().copy_(found->second.to(item.value().dtype()));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> CausalLMImpl::hf_state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters(true))
    if (!is_lora_parameter(item.key())) out.emplace_back(item.key(), item.value().detach());
  return out;
}

// The dtype a projection computes in now: autocast's (train.bf16) when it is on for the model's
// device and would lower the weights' dtype, else the weights' own.
torch::ScalarType generation_compute_dtype(const CausalLM& model) {
  return ops::autocast_compute_dtype(model->device().type(), model->model->embed_tokens->weight.scalar_type());
}

FusedGenerationWeights::FusedGenerationWeights(CausalLM& model) : model_(model) {
  if (has_lora_adapters(model_)) return;  // an adapter adds to its own projection's output
  const auto dtype = generation_compute_dtype(model_);
  for (size_t i = 0; i < model_->model->layers->size(); ++i) {
    auto layer = model_->model->layers->ptr<DecoderLayerImpl>(i);
    auto& attn = *layer->self_attn;
    auto& mlp = *layer->mlp;
    attn.generation_qkv = ops::GenerationLinear({attn.q_proj->weight, attn.k_proj->weight, attn.v_proj->weight},
                                                {attn.q_proj->bias, attn.k_proj->bias, attn.v_proj->bias}, dtype);
    attn.generation_o = ops::GenerationLinear({attn.o_proj->weight}, {attn.o_proj->bias}, dtype);
    mlp.generation_gate_up = ops::GenerationLinear({mlp.gate_proj->weight, mlp.up_proj->weight},
                                                   {torch::Tensor(), torch::Tensor()}, dtype);
    mlp.generation_down = ops::GenerationLinear({mlp.down_proj->weight}, {torch::Tensor()}, dtype);
  }
}

FusedGenerationWeights::~FusedGenerationWeights() {
  for (size_t i = 0; i < model_->model->layers->size(); ++i) {
    auto layer = model_->model->layers->ptr<DecoderLayerImpl>(i);
    layer->self_attn->generation_qkv = layer->self_attn->generation_o = ops::GenerationLinear();
    layer->mlp->generation_gate_up = layer->mlp->generation_down = ops::GenerationLinear();
  }
}

bool is_lora_parameter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters()) if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace rayless
