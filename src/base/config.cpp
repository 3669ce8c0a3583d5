#include "rayless/base/config.h"

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <limits>
#include <set>
#include <sstream>

#include "rayless/base/config_paths.h"
#include "rayless/base/error.h"
#include "rayless/base/hash.h"

namespace rayless {
namespace {

std::string toml_quote(const std::string& s) {
  std::ostringstream out;
  out << toml::value<std::string>(s);
  return out.str();
}

std::string describe_node(const toml::node& node) {
  std::ostringstream out;
  if (node.is_string()) {
    out << toml_quote(*node.value<std::string>());
  } else {
    node.visit([&](auto&& value) { out << value; });
  }
  return out.str();
}

const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
  }
}

[[noreturn]] void bad_value(const std::string& where, const std::string& key, const toml::node& node,
                            const std::string& allowed) {
  const std::string type = type_name(node);
  const char* article = std::string("aeiou").find(type[0]) != std::string::npos ? "an" : "a";
  throw InputError(str(where, "key ", key, " = ", describe_node(node), " (", article, " ", type,
                       ") is not allowed: expected ", allowed));
}

int64_t read_int(const toml::node& node, const std::string& where, const std::string& key,
                 int64_t lo, int64_t hi, const std::string& allowed) {
  auto v = node.value_exact<int64_t>();
  if (!v || *v < lo || *v > hi) bad_value(where, key, node, allowed);
  return *v;
}

double read_float(const toml::node& node, const std::string& where, const std::string& key,
                  double lo, double hi, const std::string& allowed) {
  std::optional<double> v;
  if (node.is_floating_point()) v = node.value<double>();
  if (node.is_integer()) v = static_cast<double>(*node.value<int64_t>());
  if (!v || !std::isfinite(*v) || *v < lo || *v > hi) bad_value(where, key, node, allowed);
  return *v;
}

std::string list_literal(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + toml_quote(items[i]);
  return out + "]";
}

template <typename T>
std::string number_list_literal(const std::vector<T>& items) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < items.size(); ++i) out << (i ? ", " : "") << items[i];
  out << "]";
  return out.str();
}


// Builders for the field table. Each takes an accessor returning a reference into Config.
using IntRef = std::function<int64_t&(Config&)>;
using FloatRef = std::function<double&(Config&)>;
using BoolRef = std::function<bool&(Config&)>;
using StringRef = std::function<std::string&(Config&)>;
using StringListRef = std::function<std::vector<std::string>&(Config&)>;
using IntListRef = std::function<std::vector<int64_t>&(Config&)>;
using FloatListRef = std::function<std::vector<double>&(Config&)>;

template <typename Ref>
auto const_view(Ref ref) {
  return [ref](const Config& c) -> decltype(auto) { return ref(const_cast<Config&>(c)); };
}

ConfigField int_field(std::string name, IntRef ref, int64_t lo, int64_t hi, std::string doc) {
  std::string allowed = hi == std::numeric_limits<int64_t>::max() ? str("an integer >= ", lo)
                                                                  : str("an integer in [", lo, ", ", hi, "]");
  ConfigField f{name, "int", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    ref(c) = read_int(n, where, name, lo, hi, allowed);
  };
  f.show = [=](const Config& c) { return std::to_string(const_view(ref)(c)); };
  return f;
}

// "auto" (held as 0) or an integer >= lo (lo >= 1).
ConfigField auto_or_int_field(std::string name, IntRef ref, int64_t lo, std::string doc) {
  const std::string allowed = str("\"auto\" or an integer >= ", lo);
  ConfigField f{name, "int", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    if (auto v = n.value_exact<std::string>(); v && *v == "auto") {
      ref(c) = 0;
      return;
    }
    ref(c) = read_int(n, where, name, lo, std::numeric_limits<int64_t>::max(), allowed);
  };
  f.show = [=](const Config& c) {
    const int64_t v = const_view(ref)(c);
    return v == 0 ? toml_quote("auto") : std::to_string(v);
  };
  return f;
}

ConfigField float_field(std::string name, FloatRef ref, double lo, double hi, std::string doc) {
  std::string allowed = hi == std::numeric_limits<double>::infinity()
                            ? str("a number >= ", lo)
                            : str("a number in [", lo, ", ", hi, "]");
  ConfigField f{name, "float", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    ref(c) = read_float(n, where, name, lo, hi, allowed);
  };
  f.show = [=](const Config& c) { return float_literal(const_view(ref)(c)); };
  return f;
}

ConfigField bool_field(std::string name, BoolRef ref, std::string doc) {
  ConfigField f{name, "bool", "true | false", std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    auto v = n.value_exact<bool>();
    if (!v) bad_value(where, name, n, "true or false");
    ref(c) = *v;
  };
  f.show = [=](const Config& c) { return std::string(const_view(ref)(c) ? "true" : "false"); };
  return f;
}

// choices empty = any string
ConfigField string_field(std::string name, StringRef ref, std::vector<std::string> choices, std::string doc) {
  std::string allowed;
  for (size_t i = 0; i < choices.size(); ++i) allowed += (i ? " | " : "") + choices[i];
  ConfigField f{name, "string", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    auto v = n.value_exact<std::string>();
    if (!v) bad_value(where, name, n, allowed.empty() ? "a string" : "one of " + allowed);
    if (!choices.empty() && std::find(choices.begin(), choices.end(), *v) == choices.end())
      bad_value(where, name, n, "one of " + allowed);
    ref(c) = *v;
  };
  f.show = [=](const Config& c) { return toml_quote(const_view(ref)(c)); };
  return f;
}

// A choice key: the TOML text parsed once into the enum E (names from choice_names<E>()).
template <typename E>
ConfigField choice_field(std::string name, std::function<E&(Config&)> ref, std::string doc) {
  const std::string allowed = choice_list<E>();
  ConfigField f{name, "string", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    auto v = n.value_exact<std::string>();
    if (!v) bad_value(where, name, n, "one of " + allowed);
    for (const auto& [value, text] : choice_names<E>())
      if (text == *v) {
        ref(c) = value;
        return;
      }
    bad_value(where, name, n, "one of " + allowed);
  };
  f.show = [=](const Config& c) { return toml_quote(choice_name(const_view(ref)(c))); };
  return f;
}

template <typename T, typename Read>
std::vector<T> read_list(const toml::node& n, const std::string& where, const std::string& name,
                         const std::string& expected, Read read_one) {
  const toml::array* arr = n.as_array();
  if (!arr) bad_value(where, name, n, expected);
  std::vector<T> out;
  for (const toml::node& item : *arr) out.push_back(read_one(item));
  return out;
}

ConfigField string_list_field(std::string name, StringListRef ref, std::string doc) {
  ConfigField f{name, "string list", "", std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    ref(c) = read_list<std::string>(n, where, name, "an array of strings", [&](const toml::node& item) {
      auto v = item.value_exact<std::string>();
      if (!v) bad_value(where, name, n, "an array of strings");
      return *v;
    });
  };
  f.show = [=](const Config& c) { return list_literal(const_view(ref)(c)); };
  return f;
}

ConfigField int_list_field(std::string name, IntListRef ref, int64_t lo, std::string doc) {
  std::string allowed = str("an array of integers >= ", lo);
  ConfigField f{name, "int list", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    ref(c) = read_list<int64_t>(n, where, name, allowed, [&](const toml::node& item) {
      auto v = item.value_exact<int64_t>();
      if (!v || *v < lo) bad_value(where, name, n, allowed);
      return *v;
    });
  };
  f.show = [=](const Config& c) { return number_list_literal(const_view(ref)(c)); };
  return f;
}

ConfigField float_list_field(std::string name, FloatListRef ref, std::string doc) {
  std::string allowed = "an array of finite numbers";
  ConfigField f{name, "float list", allowed, std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    ref(c) = read_list<double>(n, where, name, allowed, [&](const toml::node& item) {
      return read_float(item, where, name, -std::numeric_limits<double>::max(),
                        std::numeric_limits<double>::max(), allowed);
    });
  };
  f.show = [=](const Config& c) {
    std::vector<std::string> parts;
    for (double v : const_view(ref)(c)) parts.push_back(float_literal(v));
    std::string out = "[";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
    return out + "]";
  };
  return f;
}

// TOML values as JSON (tables keep TOML's key order); dates become their TOML text.
nlohmann::ordered_json toml_to_json(const toml::node& n) {
  if (auto t = n.as_table()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto& [key, value] : *t) j[std::string(key.str())] = toml_to_json(value);
    return j;
  }
  if (auto a = n.as_array()) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const toml::node& item : *a) j.push_back(toml_to_json(item));
    return j;
  }
  if (auto v = n.value_exact<std::string>()) return *v;
  if (auto v = n.value_exact<bool>()) return *v;
  if (auto v = n.value_exact<int64_t>()) return *v;
  if (auto v = n.value_exact<double>()) return *v;
  return describe_node(n);
}

std::string json_to_toml_inline(const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      out += str(first ? " " : ", ", toml_quote(key), " = ", json_to_toml_inline(value));
      first = false;
    }
    return out + (first ? "}" : " }");
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + json_to_toml_inline(j[i]);
    return out + "]";
  }
  if (j.is_string()) return toml_quote(j.get<std::string>());
  if (j.is_number_float()) return float_literal(j.get<double>());
  return j.dump();  // integers and booleans read the same in TOML
}

// A TOML table kept as JSON text (handed on as template variables); shown as an inline table.
ConfigField table_field(std::string name, StringRef ref, std::string doc) {
  ConfigField f{name, "table", "a table", std::move(doc), nullptr, nullptr};
  f.set = [=](Config& c, const toml::node& n, const std::string& where) {
    if (!n.is_table()) bad_value(where, name, n, "a table, e.g. { key = value }");
    ref(c) = toml_to_json(n).dump();
  };
  f.show = [=](const Config& c) { return json_to_toml_inline(nlohmann::ordered_json::parse(const_view(ref)(c))); };
  return f;
}

// grpo.scale_rewards: group | batch | none, or TRL's booleans (true = group, false = none).
ConfigField scale_rewards_field() {
  ConfigField f = choice_field<ScaleRewards>("grpo.scale_rewards", [](Config& c) -> ScaleRewards& { return c.grpo.scale_rewards; },
                                             "divide advantages by the group std, the batch std, or not at all (true = group, false = none, as TRL)");
  auto set_choice = f.set;
  f.set = [set_choice](Config& c, const toml::node& n, const std::string& where) {
    if (auto b = n.value_exact<bool>()) {
      c.grpo.scale_rewards = *b ? ScaleRewards::Group : ScaleRewards::None;
      return;
    }
    set_choice(c, n, where);
  };
  return f;
}

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

#define REF(member) [](Config& c) -> decltype(auto) { return (c.member); }

void add_model_and_data_fields(std::vector<ConfigField>& f) {
  // [model]
  f.push_back(string_field("model.path", REF(model.path), {}, "Hugging Face model directory: config.json and, if present, *.safetensors"));
  f.push_back(choice_field<ModelDtype>("model.dtype", REF(model.dtype), "parameter dtype (float16 on GPU only; float64 for reference checks against TRL)"));
  f.push_back(choice_field<DeviceChoice>("model.device", REF(model.device), "auto = CUDA device of the local rank when available, else CPU"));
  f.push_back(int_field("model.init_seed", REF(model.init_seed), 0, kNoMax, "seed of the random initialisation when the directory holds no weights"));
  // [tokenizer]
  f.push_back(string_field("tokenizer.path", REF(tokenizer.path), {}, "tokenizer.json; empty = the model directory's; \"byte\" = the byte-level tokenizer"));
  f.push_back(string_field("tokenizer.chat_template", REF(tokenizer.chat_template), {}, "auto (the model's own chat template, else none) | none | chatml | a template name of the model | a .jinja file | an inline Jinja template"));
  f.push_back(table_field("tokenizer.chat_template_kwargs", REF(tokenizer.chat_template_kwargs), "extra chat-template variables, e.g. { enable_thinking = false } (TRL's chat_template_kwargs)"));
  f.push_back(string_field("tokenizer.system_prompt", REF(tokenizer.system_prompt), {}, "system message put before a plain-text prompt when tokenizer.chat_template names a template (empty = none)"));
  // [data]
  f.push_back(string_field("data.path", REF(data.path), {}, "JSONL prompt dataset, one object per line, or a directory of *.jsonl shards read as one in name order (rows read through a byte-offset index, docs/hpc.md)"));
  f.push_back(string_field("data.prompt_field", REF(data.prompt_field), {}, "field holding the prompt: text, or a list of chat messages [{role, content}] (TRL's conversational rows)"));
  f.push_back(string_field("data.messages_field", REF(data.messages_field), {}, "field holding chat messages [{role, content}] (used when the prompt field is absent; may name the prompt field itself)"));
  f.push_back(bool_field("data.shuffle", REF(data.shuffle), "shuffle prompts each epoch (seeded by train.seed and the epoch)"));
  f.push_back(bool_field("data.skip_invalid", REF(data.skip_invalid), "skip and count bad rows (checked at start: JSON, prompt, length under truncation = error, reward fields) instead of stopping with exit 2"));
  f.push_back(int_field("data.max_prompt_length", REF(data.max_prompt_length), 1, kNoMax, "longest prompt in tokens"));
  f.push_back(choice_field<PromptTruncation>("data.truncation", REF(data.truncation), "what to do with a longer prompt: error (exit 2 at start, naming the line), or keep its last max_prompt_length tokens"));
}

void add_generation_and_rewards_fields(std::vector<ConfigField>& f) {
  // [generation]
  f.push_back(int_field("generation.max_completion_length", REF(generation.max_completion_length), 1, kNoMax, "most tokens generated per completion"));
  f.push_back(float_field("generation.temperature", REF(generation.temperature), 0.0, kInf, "sampling temperature (0 = greedy)"));
  f.push_back(float_field("generation.top_p", REF(generation.top_p), 0.0, 1.0, "nucleus sampling mass (1 = off)"));
  f.push_back(int_field("generation.top_k", REF(generation.top_k), 0, kNoMax, "keep the k most likely tokens (0 = off)"));
  f.push_back(float_field("generation.min_p", REF(generation.min_p), 0.0, 1.0, "drop tokens below min_p times the top probability (0 = off)"));
  f.push_back(float_field("generation.repetition_penalty", REF(generation.repetition_penalty), 1e-6, kInf, "CTRL-style penalty on tokens already in prompt or completion (1 = off)"));
  f.push_back(string_list_field("generation.stop_strings", REF(generation.stop_strings), "completion ends after the first of these strings"));
  f.push_back(int_list_field("generation.eos_token_ids", REF(generation.eos_token_ids), 0, "end-of-sequence ids; empty = the tokenizer's and generation_config.json's"));
  f.push_back(bool_field("generation.fused_weights", REF(generation.fused_weights), "decode with q/k/v and gate/up each fused into one matmul and, on CPUs with oneDNN, weights packed once per generation (in bfloat16 under train.bf16): faster, costs one copy of the layer weights while generating (false = the separate weights)"));
  f.push_back(auto_or_int_field("generation.slots", REF(generation.slots), 1, "decode slots of the generation engine: rows generated at once, each slot taking the next pending row when its own ends (auto = as many as fit in half of the memory free at the first generation, a slot holding the KV cache of prompt + completion positions and a row of logits: the device's free memory on CUDA, MemAvailable or the cgroup's headroom shared by the node's ranks on the CPU; never more than the rows; the log names the count)"));
  f.push_back(auto_or_int_field("generation.prefill_chunk", REF(generation.prefill_chunk), 1, "most prompt tokens (prompts x their longest) prefilled in one pass when slots are filled; a longer prompt goes in pieces of this many positions (auto = all the prompts admitted at once, in pieces of 2048 positions)"));
  f.push_back(auto_or_int_field("generation.sync_interval", REF(generation.sync_interval), 1, "decode steps between the host's looks at which rows ended (auto = 1 on the CPU, where a look is free; 8 on a GPU, where the host reads each look an interval late, its copy overlapping the next steps)"));
  f.push_back(string_field("generation.cuda_graphs", REF(generation.cuda_graphs), {"auto", "on", "off"}, "replay the decode step as CUDA graphs, one per slot bucket (auto = on a CUDA device when rayless is built with CUDA, except with dynamic RoPE; on = refuse to run without them; off = eager); no effect on the CPU"));
  // [reward]
  f.push_back(string_list_field("reward.functions", REF(reward.functions), "reward functions: built-ins length, format, answer, repetition, worker; any other name is a [reward.workers.NAME] or [reward.models.NAME] table (below)"));
  f.push_back(float_list_field("reward.reward_weights", REF(reward.reward_weights), "one weight per function; empty = all 1"));
  f.push_back(int_field("reward.length_target", REF(reward.length_target), 0, kNoMax, "length reward: -|length_target - len(completion)|"));
  f.push_back(choice_field<LengthUnit>("reward.length_unit", REF(reward.length_unit), "what the length reward counts"));
  f.push_back(string_field("reward.format_pattern", REF(reward.format_pattern), {}, "format reward: 1 when the completion matches this regex, else 0"));
  f.push_back(string_field("reward.answer_field", REF(reward.answer_field), {}, "answer reward: dataset field holding the expected answer"));
  f.push_back(choice_field<AnswerMode>("reward.answer_mode", REF(reward.answer_mode), "answer reward: exact string or numeric comparison"));
  f.push_back(int_field("reward.repetition_ngram", REF(reward.repetition_ngram), 1, kNoMax, "repetition penalty: n-gram size"));
  f.push_back(string_field("reward.worker_command", REF(reward.worker_command), {}, "worker reward: command that reads JSON lines on stdin and answers {\"reward\": x}"));
  f.push_back(float_field("reward.worker_timeout_s", REF(reward.worker_timeout_s), 0.001, kInf, "seconds a worker may take per request"));
  f.push_back(int_field("reward.worker_batch_size", REF(reward.worker_batch_size), 0, kNoMax, "0 = one line per completion; N = batched requests of N"));
}

void add_grpo_fields(std::vector<ConfigField>& f) {
  // [grpo]
  f.push_back(int_field("grpo.num_generations", REF(grpo.num_generations), 1, kNoMax, "completions sampled per prompt (the group size G)"));
  f.push_back(int_field("grpo.num_iterations", REF(grpo.num_iterations), 1, kNoMax, "mu: optimisation passes over each generation"));
  f.push_back(int_field("grpo.steps_per_generation", REF(grpo.steps_per_generation), 0, kNoMax, "micro-steps per generation; 0 = from generation_batch_size, else gradient_accumulation_steps"));
  f.push_back(int_field("grpo.generation_batch_size", REF(grpo.generation_batch_size), 0, kNoMax, "completions per generation over all ranks (TRL's); 0 = per_device_train_batch_size x ranks x steps_per_generation"));
  f.push_back(float_field("grpo.beta", REF(grpo.beta), 0.0, kInf, "KL coefficient against the reference model (0 = no reference model)"));
  f.push_back(float_field("grpo.epsilon", REF(grpo.epsilon), 0.0, kInf, "lower clip: ratio >= 1 - epsilon"));
  f.push_back(float_field("grpo.epsilon_high", REF(grpo.epsilon_high), 0.0, kInf, "upper clip: ratio <= 1 + epsilon_high; 0 = epsilon"));
  f.push_back(float_field("grpo.delta", REF(grpo.delta), 0.0, kInf, "upper cap on the ratio in the unclipped term (two-sided clipping); 0 = off"));
  f.push_back(choice_field<LossType>("grpo.loss_type", REF(grpo.loss_type), "loss normalisation and objective"));
  f.push_back(scale_rewards_field());
  f.push_back(choice_field<RewardAggregation>("grpo.multi_objective_aggregation", REF(grpo.multi_objective_aggregation), "how several reward functions combine"));
  f.push_back(choice_field<ImportanceSamplingLevel>("grpo.importance_sampling_level", REF(grpo.importance_sampling_level), "token ratios, or one ratio per sequence (GSPO)"));
  f.push_back(float_field("grpo.top_entropy_quantile", REF(grpo.top_entropy_quantile), 0.0, 1.0, "train only tokens whose entropy is in this top fraction, over all ranks (1 = all)"));
  f.push_back(choice_field<EntropyThresholdMethod>("grpo.entropy_threshold_method", REF(grpo.entropy_threshold_method), "global entropy threshold by padded gather or by distributed selection"));
  f.push_back(bool_field("grpo.use_bias_correction_kl", REF(grpo.use_bias_correction_kl), "multiply the KL term by the importance ratio (TRL's default; needs beta > 0 to matter)"));
  f.push_back(bool_field("grpo.mask_truncated_completions", REF(grpo.mask_truncated_completions), "leave completions that hit max_completion_length out of the loss"));
  f.push_back(float_field("grpo.sapo_temperature_pos", REF(grpo.sapo_temperature_pos), 1e-6, kInf, "sapo: temperature for positive advantages"));
  f.push_back(float_field("grpo.sapo_temperature_neg", REF(grpo.sapo_temperature_neg), 1e-6, kInf, "sapo: temperature for negative advantages"));
  f.push_back(bool_field("grpo.sync_ref_model", REF(grpo.sync_ref_model), "mix the policy into the reference model every ref_model_sync_steps"));
  f.push_back(float_field("grpo.ref_model_mixup_alpha", REF(grpo.ref_model_mixup_alpha), 0.0, 1.0, "ref = alpha * policy + (1 - alpha) * ref at each sync"));
  f.push_back(int_field("grpo.ref_model_sync_steps", REF(grpo.ref_model_sync_steps), 1, kNoMax, "optimizer steps between reference syncs"));
  f.push_back(int_field("grpo.logprob_chunk_size", REF(grpo.logprob_chunk_size), 1, kNoMax, "positions per LM-head chunk in the fused log-prob path"));
  f.push_back(int_field("grpo.logprob_sequence_chunk_size", REF(grpo.logprob_sequence_chunk_size), 0, kNoMax,
                        "the log-prob passes without gradients (old and reference) take longer completions in pieces of this many positions on a KV cache of the prompt (0 = one pass)"));
  f.push_back(int_field("grpo.async_lag", REF(grpo.async_lag), 0, kNoMax, "with generation ranks: generation g is sampled by the policy trained up to the start of generation g - async_lag (the first async_lag by the initial policy); 0 = on-policy"));
  f.push_back(int_field("grpo.weight_sync_steps", REF(grpo.weight_sync_steps), 1, kNoMax, "with generation ranks: new weights go to them after every N optimizer steps (at the next generation boundary)"));
  f.push_back(bool_field("grpo.vllm_importance_sampling_correction", REF(grpo.vllm_importance_sampling_correction), "weigh the loss by the importance ratio of the trainer's old log-probs to the sampling log-probs when completions come from another engine: generation ranks, or a replay file with logprobs (TRL: with vLLM)"));
  f.push_back(choice_field<ImportanceSamplingMode>("grpo.vllm_importance_sampling_mode", REF(grpo.vllm_importance_sampling_mode), "the importance ratio per token or per sequence, clipped to [clip_min, clip_max] (truncate) or zeroed outside it (mask)"));
  f.push_back(float_field("grpo.vllm_importance_sampling_clip_max", REF(grpo.vllm_importance_sampling_clip_max), 0.0, kInf, "C_max of the importance ratio (0 = no upper bound, TRL's None)"));
  f.push_back(float_field("grpo.vllm_importance_sampling_clip_min", REF(grpo.vllm_importance_sampling_clip_min), 0.0, kInf, "C_min of the importance ratio (0 = no lower bound, TRL's None)"));
  f.push_back(float_field("grpo.off_policy_mask_threshold", REF(grpo.off_policy_mask_threshold), 0.0, kInf, "drop completions with a negative advantage whose mean per-token log-ratio of sampling to current policy exceeds this (DeepSeek-V3.2's off-policy sequence mask; 0 = off, TRL's None)"));
}

void add_training_fields(std::vector<ConfigField>& f) {
  // [optim]
  f.push_back(float_field("optim.learning_rate", REF(optim.learning_rate), 0.0, kInf, "AdamW peak learning rate"));
  f.push_back(float_field("optim.adam_beta1", REF(optim.adam_beta1), 0.0, 0.999999, "AdamW beta1"));
  f.push_back(float_field("optim.adam_beta2", REF(optim.adam_beta2), 0.0, 0.999999999, "AdamW beta2"));
  f.push_back(float_field("optim.adam_epsilon", REF(optim.adam_epsilon), 0.0, 1.0, "AdamW epsilon"));
  f.push_back(float_field("optim.weight_decay", REF(optim.weight_decay), 0.0, kInf, "AdamW decoupled weight decay"));
  f.push_back(float_field("optim.max_grad_norm", REF(optim.max_grad_norm), 0.0, kInf, "clip the global gradient norm to this (0 = off)"));
  f.push_back(choice_field<LrSchedule>("optim.lr_scheduler_type", REF(optim.lr_scheduler_type), "learning-rate schedule after warmup"));
  f.push_back(int_field("optim.warmup_steps", REF(optim.warmup_steps), 0, kNoMax, "linear warmup steps (wins over warmup_ratio)"));
  f.push_back(float_field("optim.warmup_ratio", REF(optim.warmup_ratio), 0.0, 1.0, "warmup as a fraction of max_steps"));
  // [train]
  f.push_back(int_field("train.max_steps", REF(train.max_steps), 1, kNoMax, "optimizer steps to train"));
  f.push_back(int_field("train.seed", REF(train.seed), 0, kNoMax, "seed of every random stream (with rank, step and purpose)"));
  f.push_back(int_field("train.per_device_train_batch_size", REF(train.per_device_train_batch_size), 1, kNoMax, "completions per rank per micro-step"));
  f.push_back(int_field("train.gradient_accumulation_steps", REF(train.gradient_accumulation_steps), 1, kNoMax, "micro-steps per optimizer step"));
  f.push_back(bool_field("train.bf16", REF(train.bf16), "bfloat16 autocast for forward passes, backward and generation, as TRL's bf16 (fp32 master weights; generation decodes on bfloat16 copies of the weights, packed for the CPU's bfloat16 units where it has them; on a CPU without them, AVX512-BF16 or AMX, the products run as float32 ones by default: train.bf16_products)"));
  f.push_back(string_field("train.bf16_products", REF(train.bf16_products), {"auto", "bfloat16", "float32"}, "how bfloat16 matrix products run on the CPU under train.bf16: bfloat16 = LibTorch's bfloat16 kernels, as autocast and TRL call them (the same bits; emulated where the CPU has no bfloat16 units, AVX512-BF16 or AMX, many times slower than float32); float32 = the bfloat16 operands widened to float32, multiplied at the float32 rate, rounded once to bfloat16 (the same arithmetic with the float32 sums in another order: an element is the emulation's or a neighbouring bfloat16 value); auto = float32 on CPUs without bfloat16 units, else bfloat16"));
  f.push_back(bool_field("train.gradient_checkpointing", REF(train.gradient_checkpointing), "recompute layer activations in backward to save memory (under the forward's autocast with train.bf16, as torch.utils.checkpoint does)"));
  f.push_back(bool_field("train.padding_free", REF(train.padding_free), "log-prob passes compute each distinct prompt once and no padding (false: TRL's padded layout)"));
  f.push_back(string_field("train.output_dir", REF(train.output_dir), {}, "run directory (metrics, rollouts, checkpoints, logs); --output overrides"));
  f.push_back(int_field("train.max_nonfinite_steps", REF(train.max_nonfinite_steps), 1, kNoMax, "non-finite steps in a row (a NaN or infinity in the logits, rewards, log-probs, loss, its metrics or the grad norm; such a step is not applied) after which the run stops with exit 4"));
  f.push_back(string_field("train.replay_rollouts", REF(train.replay_rollouts), {}, "JSONL of prompts and completions per generation step and rank, used instead of sampling (empty = sample)"));
  // [checkpoint]
  f.push_back(int_field("checkpoint.save_steps", REF(checkpoint.save_steps), 0, kNoMax, "checkpoint every N optimizer steps (0 = only at the end and on signal)"));
  f.push_back(int_field("checkpoint.keep_last", REF(checkpoint.keep_last), 1, kNoMax, "complete checkpoints kept"));
  f.push_back(bool_field("checkpoint.save_on_signal", REF(checkpoint.save_on_signal), "SIGUSR1/SIGTERM/SIGINT: checkpoint at the next step boundary and exit 3 (false: the signal ends the run at once)"));
  // [log]
  f.push_back(int_field("log.logging_steps", REF(log.logging_steps), 1, kNoMax, "console line every N steps (metrics.jsonl gets every step)"));
  f.push_back(bool_field("log.console", REF(log.console), "progress line on rank 0's console"));
  f.push_back(choice_field<LogLevel>("log.level", REF(log.level), "log verbosity"));
  f.push_back(bool_field("log.tensorboard", REF(log.tensorboard), "TensorBoard event files with every metric per step in OUTPUT/tensorboard/ (TRL: report_to = \"tensorboard\")"));
  f.push_back(int_field("log.num_completions_to_print", REF(log.num_completions_to_print), 0, kNoMax, "at each logging step rank 0 prints a table of this many sample completions and their rewards (TRL: log_completions)"));
  f.push_back(string_field("eval.path", REF(eval.path), {}, "held-out prompts (JSONL, the training format); empty = no evaluation"));
  f.push_back(int_field("eval.steps", REF(eval.steps), 0, kNoMax, "evaluate every N optimizer steps and after the last (0 = only after the last)"));
  f.push_back(int_field("eval.num_generations", REF(eval.num_generations), 1, kNoMax, "completions per eval prompt"));
  f.push_back(int_field("eval.max_samples", REF(eval.max_samples), 0, kNoMax, "evaluate on the first N prompts (0 = all)"));
  f.push_back(bool_field("eval.greedy", REF(eval.greedy), "greedy decoding for eval (false: sampled with the [generation] settings)"));
  // [distributed]
  f.push_back(string_field("distributed.backend", REF(distributed.backend), {"auto", "mpi", "nccl"}, "collectives backend: auto = NCCL for CUDA tensors when built, else MPI"));
  f.push_back(float_field("distributed.collective_timeout_s", REF(distributed.collective_timeout_s), 0.001, kInf, "a collective taking longer aborts the job with what stalled"));
  f.push_back(int_field("distributed.threads_per_rank", REF(distributed.threads_per_rank), 0, kNoMax, "intra-op threads per rank (0 = the cores the rank is bound to by Slurm or mpirun; unbound: cores on the node / ranks on the node)"));
  f.push_back(int_field("distributed.bucket_size_mb", REF(distributed.bucket_size_mb), 0, kNoMax, "gradient allreduce bucket size in MiB (0: 4 on MPI, 25 on NCCL)"));
  f.push_back(int_field("distributed.zero_stage", REF(distributed.zero_stage), 0, 2, "ZeRO: 0 = every rank holds all gradients and AdamW state; 1 = AdamW moments sharded across ranks; 2 = gradients sharded too (stage 3, sharded parameters, is not implemented)"));
  f.push_back(int_field("distributed.generation_ranks", REF(distributed.generation_ranks), 0, kNoMax, "asynchronous GRPO: the last K ranks only generate and score, the others only train (0 = every rank does both)"));
  f.push_back(choice_field<WeightSyncDtype>("distributed.weight_sync_dtype", REF(distributed.weight_sync_dtype), "weights sent to the generation ranks in the model's dtype (exact) or in bfloat16 (half the bytes; the generators then sample from rounded weights, which the importance-sampling correction sees)"));
  // [lora]
  f.push_back(bool_field("lora.enabled", REF(lora.enabled), "train LoRA adapters instead of the whole model (PEFT's LoraConfig; the base stays frozen, the reference model for beta > 0 is the base with adapters off)"));
  f.push_back(int_field("lora.r", REF(lora.r), 1, kNoMax, "adapter rank (PEFT: r)"));
  f.push_back(float_field("lora.alpha", REF(lora.alpha), 0.0, kInf, "scaling numerator (PEFT: lora_alpha): scaling = alpha / r"));
  f.push_back(float_field("lora.dropout", REF(lora.dropout), 0.0, 0.999, "dropout on the adapter's input in training passes (PEFT: lora_dropout)"));
  f.push_back(string_list_field("lora.target_modules", REF(lora.target_modules), "linear layers that get adapters: names such as q_proj (a module whose name is it or ends with .NAME), or \"all-linear\" (every linear layer but the output head)"));
  f.push_back(bool_field("lora.use_rslora", REF(lora.use_rslora), "rank-stabilised scaling alpha / sqrt(r) (PEFT: use_rslora)"));
}

void add_agent_fields(std::vector<ConfigField>& f) {
  // [environment], [agent]; the [tools.NAME] tables are read like the named reward tables
  f.push_back(string_field("environment.command", REF(environment.command), {}, "environment worker: one instance per rollout with reset(**row), tool methods and get_reward() (TRL's environment_factory; docs/tools.md); empty = none"));
  f.push_back(float_field("environment.timeout_s", REF(environment.timeout_s), 0.001, kInf, "seconds one reset, tool call or get_reward may take; longer stops the run"));
  f.push_back(int_field("agent.max_tool_calling_iterations", REF(agent.max_tool_calling_iterations), -1, kNoMax, "rounds of tool calls per rollout (TRL's max_tool_calling_iterations; -1 = no limit, as TRL's None; 0 = calls are parsed but never run)"));
  f.push_back(bool_field("agent.keep_kv_cache", REF(agent.keep_kv_cache), "a row that stops for a tool call keeps its keys and values, and its next turn runs only the new tokens through the model (false: every turn prefills the whole conversation again, as TRL's generate does; the same tokens to rounding)"));
  f.push_back(string_field("agent.tool_call_format", REF(agent.tool_call_format), {"auto", "qwen", "llama3"}, "how completions write tool calls: qwen = <tool_call>{...}</tool_call> (Qwen2.5, Qwen3), llama3 = {\"name\": ..., \"parameters\": ...} (Llama 3.1, 3.2); auto = from the chat template"));
}

std::vector<ConfigField> build_fields() {
  std::vector<ConfigField> f;
  add_model_and_data_fields(f);
  add_generation_and_rewards_fields(f);
  add_grpo_fields(f);
  add_training_fields(f);
  add_agent_fields(f);
  return f;
}
#undef REF

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const ConfigField* find_field(const std::string& name) {
  for (const ConfigField& f : config_fields())
    if (f.name == name) return &f;
  return nullptr;
}

std::string suggestion(const std::string& key) {
  const std::string bare = key.substr(key.find('.') == std::string::npos ? 0 : key.find('.') + 1);
  if (trl_names().count(bare)) return str(" (TRL's ", bare, " is ", trl_names().at(bare), " here)");
  std::string best = closest_config_key(key);
  return best.empty() ? "" : str(" (did you mean ", best, "?)");
}

std::set<std::string> section_names() {
  std::set<std::string> out;
  for (const ConfigField& f : config_fields()) out.insert(f.name.substr(0, f.name.find('.')));
  return out;
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = build_fields();
  return fields;
}

std::string float_literal(double v) {
  char fixed[64], general[64];
  const auto fixed_end = std::to_chars(fixed, fixed + sizeof fixed, v, std::chars_format::fixed).ptr;
  const auto general_end = std::to_chars(general, general + sizeof general, v).ptr;
  std::string s = (fixed_end - fixed) < (general_end - general) + 3 ? std::string(fixed, fixed_end)
                                                                      : std::string(general, general_end);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string closest_config_key(const std::string& key) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  const std::string bare = key.substr(key.find('.') == std::string::npos ? 0 : key.find('.') + 1);
  for (const ConfigField& f : config_fields()) {
    size_t d = edit_distance(key, f.name);
    // a right key in the wrong section is close too
    const std::string field_bare = f.name.substr(f.name.find('.') + 1);
    if (field_bare == bare) d = std::min<size_t>(d, 1);
    if (d < best_distance) best_distance = d, best = f.name;
  }
  size_t limit = std::max<size_t>(2, key.size() / 3);
  return best_distance <= limit ? best : "";
}

// Printed by `rayless config reference` into docs/config.md; docs/from-trl.md maps each name to its key
// (tests cli-docs-match-code and cli-docs-from-trl).
const std::map<std::string, std::string>& trl_names() {
  static const std::map<std::string, std::string> names = {
      {"eval_steps", "eval.steps"}, {"log_completions", "log.num_completions_to_print"},
      {"report_to", "log.tensorboard"}, {"eval_dataset", "eval.path"}, {"train_dataset", "data.path"},
      {"model_name_or_path", "model.path"}, {"lr_scheduler_type", "optim.lr_scheduler_type"},
      {"processing_class", "tokenizer.path"}, {"reward_funcs", "reward.functions"},
      {"shuffle_dataset", "data.shuffle"}, {"save_total_limit", "checkpoint.keep_last"},
      {"num_generations_eval", "eval.num_generations"}, {"use_cpu", "model.device"},
      {"ddp_backend", "distributed.backend"}, {"ddp_timeout", "distributed.collective_timeout_s"},
      {"peft_config", "lora.enabled"}, {"deepspeed", "distributed.zero_stage"}, {"fsdp", "distributed.zero_stage"},
      {"vllm_importance_sampling_cap", "grpo.vllm_importance_sampling_clip_max"}};
  return names;
}

namespace {

bool valid_table_name(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// reward.workers.NAME.KEY / reward.models.NAME.KEY (the named tables the flat field list cannot hold)
bool is_named_reward_key(const std::string& name) {
  return name.rfind("reward.workers.", 0) == 0 || name.rfind("reward.models.", 0) == 0;
}

void set_named_reward_key(Config& config, const std::string& full, const toml::node& node, const std::string& where) {
  const bool worker = full.rfind("reward.workers.", 0) == 0;
  const std::string rest = full.substr(worker ? 15 : 14);
  const size_t dot = rest.find('.');
  const std::string table = worker ? "reward.workers" : "reward.models";
  inputCheck(dot != std::string::npos, where, "key ", full, ": expected ", table, ".NAME.KEY");
  const std::string name = rest.substr(0, dot), key = rest.substr(dot + 1);
  inputCheck(valid_table_name(name), where, "[", table, ".", name, "]: a name is letters, digits, _ and - only");
  auto text = [&]() {
    auto v = node.value_exact<std::string>();
    if (!v) bad_value(where, full, node, "a string");
    return *v;
  };
  if (worker) {
    RewardWorkerConfig& w = config.reward.workers[name];
    if (key == "command") w.command = text();
    else if (key == "timeout_s") w.timeout_s = read_float(node, where, full, 0.001, kInf, "a number >= 0.001");
    else if (key == "batch_size") w.batch_size = read_int(node, where, full, 0, kNoMax, "an integer >= 0");
    else throw InputError(str(where, "unknown key ", full, " (a worker table has command, timeout_s, batch_size)"));
  } else {
    RewardModelConfig& m = config.reward.models[name];
    if (key == "path") m.path = text();
    else if (key == "tokenizer") m.tokenizer = text();
    else if (key == "batch_size") m.batch_size = read_int(node, where, full, 1, kNoMax, "an integer >= 1");
    else if (key == "chat_template") m.chat_template = text();
    else throw InputError(str(where, "unknown key ", full, " (a reward-model table has path, tokenizer, batch_size, chat_template)"));
  }
}

// tools.NAME.KEY: a tool worker table
bool is_tool_key(const std::string& name) { return name.rfind("tools.", 0) == 0; }

void set_tool_key(Config& config, const std::string& full, const toml::node& node, const std::string& where) {
  const std::string rest = full.substr(6);
  const size_t dot = rest.find('.');
  inputCheck(dot != std::string::npos, where, "key ", full, ": expected tools.NAME.KEY");
  const std::string name = rest.substr(0, dot), key = rest.substr(dot + 1);
  inputCheck(valid_table_name(name), where, "[tools.", name, "]: a name is letters, digits, _ and - only");
  ToolWorkerConfig& t = config.tools[name];
  if (key == "command") {
    auto v = node.value_exact<std::string>();
    if (!v) bad_value(where, full, node, "a string");
    t.command = *v;
  } else if (key == "timeout_s") {
    t.timeout_s = read_float(node, where, full, 0.001, kInf, "a number >= 0.001");
  } else {
    throw InputError(str(where, "unknown key ", full, " (a tool table has command, timeout_s)"));
  }
}

// [tools.NAME] tables
void set_tool_tables(Config& config, const toml::node& node, const std::string& path) {
  const toml::table* tables = node.as_table();
  inputCheck(tables != nullptr, path, ":", node.source().begin.line, ": tools must be tables [tools.NAME]");
  for (const auto& [name, table_node] : *tables) {
    const toml::table* table = table_node.as_table();
    inputCheck(table != nullptr, path, ":", table_node.source().begin.line, ": tools.", name.str(),
               " must be a table [tools.", name.str(), "] with a command");
    config.tools[std::string(name.str())];  // an empty table still names one
    for (const auto& [key, value] : *table)
      set_tool_key(config, str("tools.", name.str(), ".", key.str()), value, str(path, ":", value.source().begin.line, ": "));
  }
}

std::string tool_tables_toml(const Config& config) {
  std::ostringstream out;
  for (const auto& [name, t] : config.tools)
    out << "\n[tools." << name << "]\ncommand = " << toml_quote(t.command) << "\ntimeout_s = " << float_literal(t.timeout_s) << "\n";
  return out.str();
}

// [reward.workers] / [reward.models]: a table of named tables
void set_named_reward_tables(Config& config, const std::string& kind, const toml::node& node, const std::string& path) {
  const toml::table* tables = node.as_table();
  inputCheck(tables != nullptr, path, ":", node.source().begin.line, ": reward.", kind,
             " must be tables [reward.", kind, ".NAME]");
  for (const auto& [name, table_node] : *tables) {
    const toml::table* table = table_node.as_table();
    inputCheck(table != nullptr, path, ":", table_node.source().begin.line, ": reward.", kind, ".", name.str(),
               " must be a table [reward.", kind, ".", name.str(), "]");
    // an empty table still names one; its line is where errors about the table point
    const std::string where = str(path, ":", table_node.source().begin.line, ": ");
    if (kind == "workers") config.reward.workers[std::string(name.str())].where = where;
    else config.reward.models[std::string(name.str())].where = where;
    for (const auto& [key, value] : *table)
      set_named_reward_key(config, str("reward.", kind, ".", name.str(), ".", key.str()), value,
                           str(path, ":", value.source().begin.line, ": "));
  }
}

std::string named_reward_tables_toml(const RewardConfig& r) {
  std::ostringstream out;
  for (const auto& [name, w] : r.workers)
    out << "\n[reward.workers." << name << "]\ncommand = " << toml_quote(w.command) << "\ntimeout_s = "
        << float_literal(w.timeout_s) << "\nbatch_size = " << w.batch_size << "\n";
  for (const auto& [name, m] : r.models)
    out << "\n[reward.models." << name << "]\npath = " << toml_quote(m.path) << "\ntokenizer = " << toml_quote(m.tokenizer)
        << "\nbatch_size = " << m.batch_size << "\nchat_template = " << toml_quote(m.chat_template) << "\n";
  return out.str();
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream probe(path);
  inputCheck(probe.good(), path, ": cannot open config file");
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw InputError(str(path, ":", e.source().begin.line, ": TOML syntax error: ", e.description()));
  }
  Config config;
  std::set<std::string> written;  // the keys the file sets
  const std::set<std::string> sections = section_names();
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where_section = str(path, ":", section_node.source().begin.line, ": ");
    if (section == "tools") {
      set_tool_tables(config, section_node, path);
      continue;
    }
    if (!section_node.is_table()) {  // a flat key at the top level, e.g. TRL's num_generations
      const std::string best = trl_names().count(section) ? trl_names().at(section) : closest_config_key("." + section);
      throw InputError(str(where_section, "unknown top-level key ", section,
                           best.empty() ? std::string(" (keys live in sections, e.g. [grpo])")
                                        : str(" (did you mean ", best, ", i.e. ", best.substr(best.find('.') + 1),
                                              " under [", best.substr(0, best.find('.')), "]?)")));
    }
    if (!sections.count(section)) {
      std::string hint;
      size_t best = 3;
      for (const std::string& s : sections)
        if (edit_distance(s, section) < best) best = edit_distance(s, section), hint = s;
      throw InputError(str(where_section, "unknown section [", section, "]",
                           hint.empty() ? suggestion(section) : str(" (did you mean [", hint, "]?)")));
    }
    const toml::table* table = section_node.as_table();
    inputCheck(table != nullptr, where_section, section, " must be a table [", section, "]");
    for (const auto& [key, node] : *table) {
      const std::string name = section + "." + std::string(key.str());
      const std::string where = str(path, ":", node.source().begin.line, ": ");
      if (name == "reward.workers" || name == "reward.models") {
        set_named_reward_tables(config, std::string(key.str()), node, path);
        continue;
      }
      const ConfigField* field = find_field(name);
      if (!field) throw InputError(str(where, "unknown key ", name, suggestion(name)));
      field->set(config, node, where);
      written.insert(name);
    }
  }
  // a path written in the file is relative to the file's directory (the named reward tables come
  // only from the file); --set values and defaults are relative to the working directory
  const std::filesystem::path config_dir = std::filesystem::path(path).parent_path();
  resolve_config_paths(config, config_dir.empty() ? std::filesystem::current_path() : config_dir, [&](const std::string& key) {
    return written.count(key) > 0 || key.rfind("reward.models.", 0) == 0;
  });
  for (const std::string& assignment : overrides) apply_override(config, assignment);
  // every path absolute from here on: config.resolved.toml means the same from any directory
  resolve_config_paths(config, std::filesystem::current_path(), [](const std::string&) { return true; });
  validate_config(config);
  return config;
}

Config config_from_overrides(const std::vector<std::string>& overrides) {
  Config config;
  for (const std::string& assignment : overrides) apply_override(config, assignment);
  resolve_config_paths(config, std::filesystem::current_path(), [](const std::string&) { return true; });
  validate_config(config);
  return config;
}

void apply_override(Config& config, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  inputCheck(eq != std::string::npos && eq > 0, "--set ", assignment, ": expected section.key=value");
  std::string name = assignment.substr(0, eq);
  name.erase(name.find_last_not_of(" \t") + 1);
  const std::string value = assignment.substr(eq + 1);
  const ConfigField* field = find_field(name);
  inputCheck(field != nullptr || is_named_reward_key(name) || is_tool_key(name), "--set ", name, ": unknown key",
             suggestion(name));
  // The value is TOML (1, 0.5, true, "x", [1, 2]); a bare word that is not TOML is taken as a string.
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};
  }
  if (!field && is_tool_key(name)) return set_tool_key(config, name, *parsed.get("v"), "--set: ");
  if (!field) return set_named_reward_key(config, name, *parsed.get("v"), "--set: ");
  field->set(config, *parsed.get("v"), "--set: ");
}

namespace {
bool uses_reward(const Config& c, const char* name) {
  return std::find(c.reward.functions.begin(), c.reward.functions.end(), name) != c.reward.functions.end();
}
}  // namespace

const std::vector<std::string>& known_reward_functions() {
  static const std::vector<std::string> names = {"length", "format", "answer", "repetition", "worker"};
  return names;
}

// The rules about [reward]: names, tables, weights (part of cross_field_rules, kept apart for length).
std::vector<CrossFieldRule> reward_rules() {
  return {
      {"`reward.reward_weights`, when given, has one weight per entry of `reward.functions`", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.reward.reward_weights.empty() || c.reward.reward_weights.size() == c.reward.functions.size()) return "";
         return str("reward.reward_weights has ", c.reward.reward_weights.size(), " weights for ",
                    c.reward.functions.size(), " reward.functions: give one weight per function");
       }},
      {"`reward.functions` names at least one function, none twice; each is a built-in (length, format, answer, repetition, worker) or has its own `[reward.workers.NAME]` or `[reward.models.NAME]` table", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.reward.functions.empty()) return "reward.functions is empty: name at least one reward function";
         std::set<std::string> seen;
         const auto& known = known_reward_functions();
         for (const std::string& name : c.reward.functions) {
           const bool builtin = std::find(known.begin(), known.end(), name) != known.end();
           const bool worker = c.reward.workers.count(name) > 0, model = c.reward.models.count(name) > 0;
           if (builtin && (worker || model))
             return str("[reward.", worker ? "workers" : "models", ".", name, "]: \"", name,
                        "\" is a built-in reward; give the table another name");
           if (worker && model) return str("\"", name, "\" is both a [reward.workers.", name, "] and a [reward.models.", name, "]");
           if (!builtin && !worker && !model)
             return str("reward.functions: unknown reward function \"", name,
                        "\": not a built-in (length, format, answer, repetition, worker) and no [reward.workers.", name,
                        "] or [reward.models.", name, "] table");
           if (!seen.insert(name).second) return str("reward.functions names \"", name, "\" twice");
         }
         return "";
       }},
      {"every `[reward.workers.NAME]` and `[reward.models.NAME]` is named in `reward.functions`; a worker table has a `command`, a model table a `path`", false,
       [](const Config& c, int64_t) -> std::string {
         for (const auto& [name, w] : c.reward.workers) {
           if (!uses_reward(c, name.c_str()))
             return str(w.where, "[reward.workers.", name, "] is defined but reward.functions does not name \"", name, "\"");
           if (w.command.empty()) return str(w.where, "[reward.workers.", name, "] has no command");
         }
         for (const auto& [name, m] : c.reward.models) {
           if (!uses_reward(c, name.c_str()))
             return str(m.where, "[reward.models.", name, "] is defined but reward.functions does not name \"", name, "\"");
           if (m.path.empty()) return str(m.where, "[reward.models.", name, "] has no path");
         }
         return "";
       }},
      {"the `worker` reward needs `reward.worker_command`, the `format` reward `reward.format_pattern`", false,
       [](const Config& c, int64_t) -> std::string {
         if (uses_reward(c, "worker") && c.reward.worker_command.empty())
           return "reward.functions names \"worker\" but reward.worker_command is empty";
         if (uses_reward(c, "format") && c.reward.format_pattern.empty())
           return "reward.functions names \"format\" but reward.format_pattern is empty";
         return "";
       }}
  };
}

// The first rules of the table: generation geometry.
std::vector<CrossFieldRule> first_rules() {
  return {
      {"`grpo.num_generations >= 2` unless `grpo.scale_rewards = \"none\"` (a group of one has advantage 0)", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.grpo.num_generations >= 2 || c.grpo.scale_rewards == ScaleRewards::None) return "";
         return str("grpo.num_generations = ", c.grpo.num_generations,
                    " leaves every group with one completion, so every advantage is 0: use >= 2");
       }},
      {"`grpo.generation_batch_size` and `grpo.steps_per_generation` are not both set (as TRL)", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.grpo.steps_per_generation == 0 || c.grpo.generation_batch_size == 0) return "";
         return "grpo.generation_batch_size and grpo.steps_per_generation cannot both be set (TRL refuses it too): set one";
       }}
  };
}

// The rest of the table: reference model, dtype, clipping, templates, and the rules that need the
// number of ranks.
std::vector<CrossFieldRule> other_rules() {
  return {
      {"`grpo.sync_ref_model` needs `grpo.beta > 0` (a reference model)", false,
       [](const Config& c, int64_t) -> std::string {
         if (!c.grpo.sync_ref_model || c.grpo.beta > 0) return "";
         return "grpo.sync_ref_model = true needs a reference model: set grpo.beta > 0";
       }},
      {"`lora.enabled` excludes `grpo.sync_ref_model` (a LoRA run's reference is the base with adapters off)", false,
       [](const Config& c, int64_t) -> std::string {
         if (!c.lora.enabled || !c.grpo.sync_ref_model) return "";
         return "grpo.sync_ref_model = true cannot be used with lora.enabled = true: the reference is the base model "
                "with the adapters off, there is no second copy to mix the policy into";
       }},
      {"`lora.dropout > 0` excludes `train.gradient_checkpointing` (recomputation would draw new dropout masks)", false,
       [](const Config& c, int64_t) -> std::string {
         if (!c.lora.enabled || c.lora.dropout == 0 || !c.train.gradient_checkpointing) return "";
         return str("lora.dropout = ", c.lora.dropout, " cannot be used with train.gradient_checkpointing = true: the "
                    "recomputed layers would draw new dropout masks; set one of them off");
       }},
      {"`model.dtype = \"float16\"` only on a GPU: refused with `model.device = \"cpu\"` here, and at start when `auto` finds no CUDA device", false,
       [](const Config& c, int64_t) -> std::string {
         if (!(c.model.dtype == ModelDtype::Float16 && c.model.device == DeviceChoice::Cpu)) return "";
         return "model.dtype = \"float16\" is for GPUs only";
       }},
      {"`grpo.epsilon < 1` unless `grpo.loss_type = \"cispo\"` (the lower clip bound 1 - epsilon stays positive)", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.grpo.epsilon < 1.0 || c.grpo.loss_type == LossType::Cispo) return "";
         return str("grpo.epsilon = ", c.grpo.epsilon, " makes the lower clip bound 1 - epsilon <= 0: use < 1");
       }},
      {"`grpo.async_lag > 0` and `grpo.weight_sync_steps > 1` need `distributed.generation_ranks > 0` (with every "
       "rank generating from its own copy of the policy there is nothing to lag behind)", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.distributed.generation_ranks > 0) return "";
         if (c.grpo.async_lag > 0)
           return str("grpo.async_lag = ", c.grpo.async_lag,
                      " needs distributed.generation_ranks > 0: without generation ranks every rank samples from the "
                      "policy it trains, so there is no lag to set");
         if (c.grpo.weight_sync_steps > 1)
           return str("grpo.weight_sync_steps = ", c.grpo.weight_sync_steps,
                      " needs distributed.generation_ranks > 0: without generation ranks no weights are sent");
         return "";
       }},
      {"`[tools.NAME]` and `[environment]` exclude `distributed.generation_ranks > 0` (the generation ranks do not run the "
       "tool loop yet)", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.distributed.generation_ranks == 0 || !c.agentic()) return "";
         return "tools and environments ([tools.NAME], [environment]) cannot be used with distributed.generation_ranks > 0 "
                "yet: the generation ranks sample single-turn completions";
       }},
      {"`train.replay_rollouts` excludes `distributed.generation_ranks > 0` (replayed completions are not generated)", false,
       [](const Config& c, int64_t) -> std::string {
         if (c.distributed.generation_ranks == 0 || c.train.replay_rollouts.empty()) return "";
         return "train.replay_rollouts cannot be used with distributed.generation_ranks > 0: replayed completions are "
                "read from the file, there is nothing for generation ranks to do";
       }},
      {"at start, with the number of ranks known: `distributed.generation_ranks` leaves at least one rank to train",
       true,
       [](const Config& c, int64_t world_size) -> std::string {
         if (c.training_ranks(world_size) >= 1) return "";
         return str("distributed.generation_ranks = ", c.distributed.generation_ranks, " with ", world_size,
                    " rank(s) leaves no rank to train: use fewer than ", world_size, " generation ranks");
       }},
      {"at start, with the number of ranks known: `grpo.generation_batch_size` is a multiple of "
       "`train.per_device_train_batch_size` x training ranks (all ranks but the generation ranks)", true,
       [](const Config& c, int64_t world_size) -> std::string {
         const int64_t ranks = c.training_ranks(world_size);
         const int64_t global_batch = c.train.per_device_train_batch_size * ranks;
         if (ranks < 1 || c.grpo.generation_batch_size == 0 || c.grpo.generation_batch_size % global_batch == 0) return "";
         return str("grpo.generation_batch_size = ", c.grpo.generation_batch_size,
                    " must be a multiple of train.per_device_train_batch_size x training ranks = ",
                    c.train.per_device_train_batch_size, " x ", ranks, " = ", global_batch);
       }},
      {"at start, with the number of ranks known: the generation batch of all training ranks "
       "(`train.per_device_train_batch_size` x training ranks x steps per generation) is a multiple of "
       "`grpo.num_generations`, as TRL asks; a group may span ranks", true,
       [](const Config& c, int64_t world_size) -> std::string {
         const int64_t ranks = c.training_ranks(world_size);
         if (ranks < 1) return "";
         const int64_t generation_batch = c.global_generation_batch(ranks);
         if (generation_batch % c.grpo.num_generations == 0) return "";
         return str("the generation batch (train.per_device_train_batch_size ", c.train.per_device_train_batch_size,
                    " x ", ranks, " training ranks x steps_per_generation ", c.effective_steps_per_generation(ranks),
                    " = ", generation_batch, " completions) must be a multiple of grpo.num_generations = ",
                    c.grpo.num_generations);
       }},
      {"at start, with the number of ranks known: each generation rank has at least one completion of a "
       "generation to sample", true,
       [](const Config& c, int64_t world_size) -> std::string {
         // a training rank's slice is shared by at most ceil(K / training ranks) generation ranks
         const int64_t ranks = c.training_ranks(world_size), generators = c.distributed.generation_ranks;
         if (ranks < 1 || generators == 0) return "";
         const int64_t per_rank = c.global_generation_batch(ranks) / ranks, sharing = (generators + ranks - 1) / ranks;
         if (per_rank >= sharing) return "";
         return str("distributed.generation_ranks = ", generators, " with ", ranks, " training rank(s): up to ", sharing,
                    " generation ranks share one training rank's ", per_rank,
                    " completions of a generation; use fewer generation ranks or more completions per rank");
       }},
  };
}

// The one table of cross-field rules: validation runs it, `rayless config reference` prints it into
// docs/config.md (a test checks both ways). A rule returns "" when the config keeps it, else the error.
const std::vector<CrossFieldRule>& cross_field_rules() {
  static const std::vector<CrossFieldRule> rules = [] {
    std::vector<CrossFieldRule> all = first_rules();
    for (auto& rule : reward_rules()) all.push_back(std::move(rule));
    for (auto& rule : other_rules()) all.push_back(std::move(rule));
    all.push_back({"every `[tools.NAME]` table has a `command`", false, [](const Config& c, int64_t) -> std::string {
                     for (const auto& [name, t] : c.tools)
                       if (t.command.empty()) return str("[tools.", name, "] has no command");
                     return "";
                   }});
    return all;
  }();
  return rules;
}


void validate_config(const Config& c) {
  for (const CrossFieldRule& rule : cross_field_rules())
    if (!rule.needs_world_size) {
      const std::string problem = rule.violation(c, 1);
      inputCheck(problem.empty(), problem);
    }
}

void check_batch_geometry(const Config& c, int64_t world_size) {
  for (const CrossFieldRule& rule : cross_field_rules())
    if (rule.needs_world_size) {
      const std::string problem = rule.violation(c, world_size);
      inputCheck(problem.empty(), problem);
    }
}

int64_t Config::effective_steps_per_generation(int64_t world_size) const {
  if (grpo.steps_per_generation > 0) return grpo.steps_per_generation;
  if (grpo.generation_batch_size > 0)
    return std::max<int64_t>(1, grpo.generation_batch_size / (train.per_device_train_batch_size * std::max<int64_t>(1, world_size)));
  return train.gradient_accumulation_steps;
}

std::string config_to_toml(const Config& config) {
  std::ostringstream out;
  std::string current;
  for (const ConfigField& f : config_fields()) {
    const std::string section = f.name.substr(0, f.name.find('.'));
    if (section != current) {
      out << (current.empty() ? "" : "\n") << "[" << section << "]\n";
      current = section;
    }
    out << f.name.substr(section.size() + 1) << " = " << f.show(config) << "\n";
  }
  return out.str() + named_reward_tables_toml(config.reward) + tool_tables_toml(config);
}

std::string config_hash(const Config& config) {
  std::string material;
  for (const ConfigField& f : config_fields()) {
    const std::string section = f.name.substr(0, f.name.find('.'));
    static const std::set<std::string> decisive = {"model", "tokenizer", "data", "generation", "reward"};
    // the engine's settings change how rows are scheduled, not what they hold
    static const std::set<std::string> scheduling = {"generation.slots", "generation.prefill_chunk",
                                                     "generation.sync_interval", "generation.cuda_graphs"};
    if (scheduling.count(f.name)) continue;
    if (decisive.count(section) || f.name == "grpo.num_generations") material += f.name + "=" + f.show(config) + "\n";
  }
  // named reward tables, tools and the environment only when present, so hashes of configs without
  // them stay as they were
  if (config.agentic())
    for (const ConfigField& f : config_fields())
      if (f.name.rfind("environment.", 0) == 0 || f.name.rfind("agent.", 0) == 0) material += f.name + "=" + f.show(config) + "\n";
  return fnv1a64_hex(material + named_reward_tables_toml(config.reward) + tool_tables_toml(config));
}

}  // namespace rayless
