// RoPE scaling types, computed as transformers 5.24 does (modeling_rope_utils.py): frequencies in
// float32 with the same operation order, so logits agree to rounding. See include/rayless/model/rope_tables.h.
#include "rayless/model/rope_tables.h"

#include <cmath>
#include <optional>
#include <set>

#include "rayless/base/error.h"

namespace rayless {

namespace {

constexpr double kPi = 3.14159265358979323846;

// Every key transformers' RopeParameters may hold; keys a type does not use are ignored, as there.
const std::set<std::string>& rope_parameter_keys() {
  static const std::set<std::string> keys = {
      "rope_type", "type", "rope_theta", "partial_rotary_factor", "factor", "original_max_position_embeddings",
      "attention_factor", "beta_fast", "beta_slow", "short_factor", "long_factor", "low_freq_factor",
      "high_freq_factor", "mscale", "mscale_all_dim", "truncate", "mrope_section"};
  return keys;
}

// Reads the RoPE dict's keys, naming them as `<field>.<key>` in errors.
struct RopeDict {
  const nlohmann::json& dict;
  std::string field, where, type;

  bool has(const char* key) const { return dict.contains(key) && !dict[key].is_null(); }
  std::string name(const char* key) const { return field.empty() ? key : field + "." + key; }
  double number(const char* key, std::optional<double> fallback = {}) const {
    if (!has(key)) {
      inputCheck(fallback.has_value(), where, ": ", name(key), " is required for rope_type \"", type, "\"");
      return *fallback;
    }
    inputCheck(dict[key].is_number(), where, ": ", name(key), " must be a number");
    return dict[key].get<double>();
  }
  double positive(const char* key, std::optional<double> fallback = {}) const {
    const double value = number(key, fallback);
    inputCheck(value > 0, where, ": ", name(key), " = ", value, " must be > 0");
    return value;
  }
};

// The dict transformers reads: rope_scaling when it is a non-empty object, else rope_parameters.
std::pair<nlohmann::json, std::string> chosen_rope_dict(const nlohmann::json& config, const std::string& where) {
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    if (!config.contains(field) || config[field].is_null()) continue;
    inputCheck(config[field].is_object(), where, ": ", field, " must be an object or null");
    if (!config[field].empty()) return {config[field], field};
  }
  return {nlohmann::json::object(), "rope_parameters"};
}

void read_yarn(RopeConfig& c, const RopeDict& d, int64_t max_position_embeddings) {
  inputCheck(d.dict.contains("factor"), d.where, ": ", d.field, ".factor is required for rope_type \"yarn\"");
  c.factor = d.has("factor") ? d.positive("factor")
                             : double(max_position_embeddings) / double(c.original_max_position_embeddings);
  // transformers: beta_fast/beta_slow fall back to 32/1 when missing or 0
  c.beta_fast = d.number("beta_fast", 0.0) != 0.0 ? d.number("beta_fast") : 32.0;
  c.beta_slow = d.number("beta_slow", 0.0) != 0.0 ? d.number("beta_slow") : 1.0;
  if (d.has("truncate")) {
    inputCheck(d.dict["truncate"].is_boolean(), d.where, ": ", d.field, ".truncate must be true or false");
    c.truncate = d.dict["truncate"].get<bool>();
  }
  // the paper's attention scaling 0.1 ln(s) + 1, or the ratio of two such terms (DeepSeek's mscale)
  auto mscale_of = [&](double scale) { return c.factor <= 1.0 ? 1.0 : 0.1 * scale * std::log(c.factor) + 1.0; };
  const double mscale = d.number("mscale", 0.0), mscale_all_dim = d.number("mscale_all_dim", 0.0);
  if (d.has("attention_factor"))
    c.attention_factor = d.positive("attention_factor");
  else if (mscale != 0.0 && mscale_all_dim != 0.0)
    c.attention_factor = mscale_of(mscale) / mscale_of(mscale_all_dim);
  else
    c.attention_factor = mscale_of(1.0);
}

}  // namespace

const char* RopeConfig::name(RopeType type) {
  switch (type) {
    case RopeType::Linear: return "linear";
    case RopeType::Dynamic: return "dynamic";
    case RopeType::Llama3: return "llama3";
    case RopeType::Yarn: return "yarn";
    default: return "default";
  }
}

RopeConfig RopeConfig::from_config_json(const nlohmann::json& config, int64_t max_position_embeddings,
                                        const std::string& where) {
  const auto [dict, field] = chosen_rope_dict(config, where);
  RopeDict d{dict, field, where, "default"};
  for (auto it = dict.begin(); it != dict.end(); ++it)
    inputCheck(rope_parameter_keys().count(it.key()), where, ": ", field, ".", it.key(), " is not a RoPE parameter");
  RopeConfig c;
  const char* type_key = d.has("rope_type") ? "rope_type" : "type";
  std::string type = "default";
  if (d.has(type_key)) {
    inputCheck(dict[type_key].is_string(), where, ": ", field, ".", type_key, " must be a string");
    type = dict[type_key].get<std::string>();
  }
  d.type = type;
  c.theta = d.has("rope_theta") ? d.positive("rope_theta")
            : config.contains("rope_theta") && !config["rope_theta"].is_null()
                ? RopeDict{config, "", where, type}.positive("rope_theta")
                : 10000.0;
  const double partial = d.has("partial_rotary_factor") ? d.number("partial_rotary_factor")
                         : RopeDict{config, "", where, type}.number("partial_rotary_factor", 1.0);
  inputCheck(partial == 1.0, where, ": partial_rotary_factor = ", partial,
             " is not supported (qwen2, qwen3, llama and mistral rotate the whole head in transformers)");
  c.original_max_position_embeddings = d.has("original_max_position_embeddings")
                                           ? static_cast<int64_t>(d.positive("original_max_position_embeddings"))
                                           : max_position_embeddings;
  if (type == "default") return c;
  if (type == "linear" || type == "dynamic") {
    c.type = type == "linear" ? RopeType::Linear : RopeType::Dynamic;
    c.factor = d.positive("factor");
    return c;
  }
  if (type == "llama3") {
    c.type = RopeType::Llama3;
    c.factor = d.positive("factor");
    c.low_freq_factor = d.positive("low_freq_factor");
    c.high_freq_factor = d.positive("high_freq_factor");
    inputCheck(c.high_freq_factor > c.low_freq_factor, where, ": ", field, ".high_freq_factor must be greater than ",
               field, ".low_freq_factor");
    return c;
  }
  if (type == "yarn") {
    c.type = RopeType::Yarn;
    read_yarn(c, d, max_position_embeddings);
    return c;
  }
  throw InputError(str(where, ": ", field, ".", type_key, " = \"", type,
                       "\" is not supported (supported: default, linear, dynamic, llama3, yarn)"));
}

// ---- frequencies -------------------------------------------------------------------------------

namespace {

torch::Tensor even_exponents(int64_t dim) {  // arange(0, dim, 2) / dim, float32
  return torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat32) / double(dim);
}

torch::Tensor default_frequencies(double theta, int64_t dim) {
  return 1.0 / torch::pow(torch::scalar_tensor(theta, torch::kFloat32), even_exponents(dim));
}

// Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth blend in between.
torch::Tensor llama3_frequencies(const RopeConfig& c, int64_t dim) {
  const auto inv = default_frequencies(c.theta, dim);
  const double old_length = double(c.original_max_position_embeddings);
  const double low_freq_wavelength = old_length / c.low_freq_factor;
  const double high_freq_wavelength = old_length / c.high_freq_factor;
  const auto wavelength = 2 * kPi / inv;
  const auto scaled = torch::where(wavelength > low_freq_wavelength, inv / c.factor, inv);
  const auto smooth = (old_length / wavelength - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
  const auto smoothed = (1 - smooth) * scaled / c.factor + smooth * scaled;
  const auto medium = (wavelength >= high_freq_wavelength) & (wavelength <= low_freq_wavelength);
  return torch::where(medium, smoothed, scaled);
}

// YaRN: dimensions that rotate many times within the original length keep their frequency
// (extrapolation), slow ones are divided by factor (interpolation), with a linear ramp in between.
torch::Tensor yarn_frequencies(const RopeConfig& c, int64_t dim) {
  const auto pos_freqs = torch::pow(torch::scalar_tensor(c.theta, torch::kFloat32), even_exponents(dim));
  const auto extrapolated = 1.0 / pos_freqs;
  const auto interpolated = 1.0 / (c.factor * pos_freqs);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(double(c.original_max_position_embeddings) / (rotations * 2 * kPi)) / (2 * std::log(c.theta));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // no zero-width ramp
  const auto ramp = ((torch::arange(dim / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  const auto extrapolation_share = 1 - ramp;
  return interpolated * (1 - extrapolation_share) + extrapolated * extrapolation_share;
}

// Dynamic NTK past the original length: a larger base, computed in float32 as transformers does
// when it recomputes inside the forward pass (the length arrives there as a tensor).
torch::Tensor dynamic_frequencies(const RopeConfig& c, int64_t dim, int64_t length, int64_t original_length) {
  const auto seq_len = torch::scalar_tensor(length, torch::kLong);
  const auto base = ((seq_len * c.factor) / original_length - (c.factor - 1)).pow(double(dim) / double(dim - 2)) * c.theta;
  return 1.0 / torch::pow(base, even_exponents(dim));
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(RopeConfig config, int64_t head_dim, int64_t max_position_embeddings)
    : config_(config), head_dim_(head_dim), max_position_embeddings_(max_position_embeddings) {}

torch::Tensor RotaryEmbedding::inverse_frequencies(int64_t length) const {
  switch (config_.type) {
    case RopeType::Linear: return default_frequencies(config_.theta, head_dim_) / config_.factor;
    case RopeType::Llama3: return llama3_frequencies(config_, head_dim_);
    case RopeType::Yarn: return yarn_frequencies(config_, head_dim_);
    case RopeType::Dynamic:
      if (length > max_position_embeddings_)
        return dynamic_frequencies(config_, head_dim_, length, max_position_embeddings_);
      return default_frequencies(config_.theta, head_dim_);
    default: return default_frequencies(config_.theta, head_dim_);
  }
}

// The length dynamic scaling sizes its frequencies for (0 for the other types). transformers uses
// max(position_ids) + 1 of the call and keeps state across calls: grow when a call reaches further,
// reset below the original length. In a generation every row advances by the call's width even after
// it finished (transformers keeps finished rows in the batch), so rows rayless dropped still count.
int64_t RotaryEmbedding::scaled_length(const torch::Tensor& position_ids, DynamicRopeState* state) const {
  if (config_.type != RopeType::Dynamic) return 0;
  int64_t length = position_ids.max().item<int64_t>() + 1;
  if (!state) return std::max(length, max_position_embeddings_);
  if (state->positions_seen > 0) length = std::max(length, state->positions_seen + position_ids.size(1));
  state->positions_seen = length;
  if (state->cached_length == 0) state->cached_length = max_position_embeddings_;
  if (length > state->cached_length)
    state->cached_length = length;
  else if (length < max_position_embeddings_ && state->cached_length > max_position_embeddings_)
    state->cached_length = max_position_embeddings_;
  return state->cached_length;
}

torch::Tensor RotaryEmbedding::frequencies_on(const torch::Tensor& position_ids, int64_t length) const {
  if (!cached_.defined() || cached_length_ != length || cached_.device() != position_ids.device()) {
    cached_ = inverse_frequencies(length).to(position_ids.device());
    cached_length_ = length;
  }
  return cached_;
}

RotaryTables RotaryEmbedding::tables(const torch::Tensor& position_ids, torch::Dtype dtype, DynamicRopeState* state) const {
  const auto inv_freq = frequencies_on(position_ids, scaled_length(position_ids, state));
  const auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [B, T, D/2]
  const auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos(), sin = emb.sin();
  if (config_.attention_factor != 1.0) {  // yarn scales the attention logits through q and k
    cos = cos * config_.attention_factor;
    sin = sin * config_.attention_factor;
  }
  return {cos.to(dtype), sin.to(dtype), {}, {}};
}

}  // namespace rayless
