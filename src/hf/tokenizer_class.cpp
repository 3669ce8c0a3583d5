// AutoTokenizer's class choice and each class's pipeline, as transformers 5.24 has them
// (models/auto/tokenization_auto.py, tokenization_utils_tokenizers.py, models/qwen2 and gpt2), for the
// families rayless loads: qwen2, qwen3, llama, mistral. Checked against transformers on the
// directories of tests/data/tokenizer-classes (tools/make_tokenizer_class_golden.py).
#include "rayless/hf/tokenizer_class.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>

#include "rayless/base/error.h"
#include "rayless/base/files.h"

namespace rayless {
namespace {

using json = nlohmann::ordered_json;

// The split regexes of the public byte-level tokenizers, to name them in notes.
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Kind { Backend, Qwen2, Gpt2, Llama, Unknown };

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::Qwen2: return "Qwen2Tokenizer";
    case Kind::Gpt2: return "GPT2Tokenizer";
    case Kind::Llama: return "LlamaTokenizer";
    default: return "TokenizersBackend";
  }
}

std::string strip_fast(const std::string& name) {
  const std::string suffix = "Fast";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
             ? name.substr(0, name.size() - suffix.size())
             : name;
}

// tokenizer_class_from_name for the names these families' checkpoints write; Unknown for the rest
// (transformers loads TokenizersBackend for names it does not know).
Kind kind_of_name(const std::string& name) {
  const std::string base = strip_fast(name);
  if (base == "Qwen2Tokenizer") return Kind::Qwen2;
  if (base == "GPT2Tokenizer") return Kind::Gpt2;
  if (base == "LlamaTokenizer") return Kind::Llama;
  if (base == "TokenizersBackend" || base == "PreTrainedTokenizer" || base == "PythonBackend" || base == "BloomTokenizer")
    return Kind::Backend;
  return Kind::Unknown;
}

// TOKENIZER_MAPPING_NAMES for the families rayless loads ("" = none registered, as for llama). mistral
// registers MistralCommonBackend only where the mistral-common package is installed (with tekken.json),
// TokenizersBackend otherwise; rayless reads no tekken.json.
std::string registered_class(const std::string& model_type) {
  if (model_type == "qwen2" || model_type == "qwen3") return "Qwen2Tokenizer";
  if (model_type == "mistral") return "TokenizersBackend";
  return "";
}
// MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: the registered class wins over what the files name.
bool named_class_overruled(const std::string& model_type) { return model_type == "qwen2"; }

std::optional<json> read_json_object(const std::filesystem::path& file) {
  if (file.empty() || !std::filesystem::exists(file)) return std::nullopt;
  json j;
  try {
    j = json::parse(read_text_file(file));
  } catch (const json::exception& e) {
    throw InputError(str(file.string(), ": invalid JSON: ", e.what()));
  }
  inputCheck(j.is_object(), file.string(), ": expected a JSON object");
  return j;
}

std::string string_at(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct Choice {
  Kind kind;
  std::string name;
  std::string reason;
};

Choice named(Kind kind, const std::string& reason) {
  if (kind == Kind::Unknown)
    return {Kind::Backend, "TokenizersBackend",
            str(reason, ", a class rayless does not model: tokenizer.json is used as it is (as transformers does for "
                        "names it does not know)")};
  return {kind, name_of(kind), reason};
}

// AutoTokenizer.from_pretrained's choice, in its order (no auto_map: rayless runs no remote code).
Choice choose_class(const json& tokenizer_config, const json& config, bool has_config, bool byte_level) {
  const std::string model_type = string_at(config, "model_type");
  const std::string declared = string_at(tokenizer_config, "tokenizer_class");
  const std::string in_config = string_at(config, "tokenizer_class");
  const std::string hub = declared.empty() ? in_config : declared;
  const std::string hub_file = declared.empty() ? "config.json" : "tokenizer_config.json";
  const std::string registered = registered_class(model_type);
  const std::string type_text = str("config.json model_type \"", model_type, "\"");
  if (!hub.empty() && strip_fast(hub) == "LlamaTokenizer" && !named_class_overruled(model_type) && byte_level)
    return {Kind::Backend, "TokenizersBackend",
            str(hub_file, " names ", hub, " over a byte-level tokenizer.json, which transformers loads as TokenizersBackend")};
  if (!hub.empty() && !registered.empty() && strip_fast(registered) != strip_fast(hub)) {
    if (registered != "TokenizersBackend") {
      if (named_class_overruled(model_type))
        return named(kind_of_name(registered),
                     str(type_text, ": transformers loads ", registered, " for it whatever the files name (", hub_file,
                         ": ", hub, ")"));
      const Kind kind = kind_of_name(hub);
      if (kind != Kind::Backend && kind != Kind::Unknown) return named(kind, str(hub_file, " names ", hub));
    }
    return {Kind::Backend, "TokenizersBackend",
            str(type_text, " with ", hub_file, " naming ", hub, ": transformers loads TokenizersBackend")};
  }
  if (!declared.empty()) return named(kind_of_name(declared), str("tokenizer_config.json names ", declared));
  if (!in_config.empty()) return named(kind_of_name(in_config), str("config.json names ", in_config));
  if (!registered.empty()) return named(kind_of_name(registered), str(type_text, ", no tokenizer_class named"));
  return {Kind::Backend, "TokenizersBackend",
          has_config && !model_type.empty() ? str(type_text, " has no tokenizer class of its own")
                                            : std::string("no tokenizer_class and no model type")};
}

// ---- the class's pipeline -----------------------------------------------------------------------

json byte_level_pre_tokenizer(bool prefix_space, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", prefix_space}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json class_pre_tokenizer(Kind kind, bool prefix_space) {
  if (kind == Kind::Gpt2) return byte_level_pre_tokenizer(prefix_space, true);
  json split = {{"type", "Split"}, {"pattern", {{"Regex", kQwen2Regex}}}, {"behavior", "Isolated"}, {"invert", false}};
  return {{"type", "Sequence"}, {"pretokenizers", json::array({split, byte_level_pre_tokenizer(prefix_space, false)})}};
}

// The BPE the class constructs: the file's vocabulary and merges, its own options.
json class_model(const json& model) {
  json out = {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"continuing_subword_prefix", ""},
              {"end_of_word_suffix", ""},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false}};
  out["vocab"] = model.contains("vocab") ? model["vocab"] : json::object();
  out["merges"] = model.contains("merges") ? model["merges"] : json::array();
  return out;
}

// ---- added tokens -------------------------------------------------------------------------------

std::optional<std::string> token_content(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) return value["content"].get<std::string>();
  return std::nullopt;
}

json special_entry(const std::string& content) {
  return {{"id", 0},           {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false},  {"special", true}};
}

// The added tokens after loading: the base list (tokenizer.json's, or for classes that rebuild,
// tokenizer_config.json's added_tokens_decoder when it has one), then the special tokens of
// tokenizer_config.json and the class's defaults that are missing. Each is (re)added as the tokenizers
// library does: a vocabulary token keeps its id, any other takes the next free id.
json added_tokens_after_load(Kind kind, const json& file, const json& tokenizer_config, const std::string& config_file) {
  const json vocab = file["model"].contains("vocab") && file["model"]["vocab"].is_object() ? file["model"]["vocab"] : json::object();
  const int64_t vocab_count = static_cast<int64_t>(vocab.size());
  json result = json::array();
  std::set<std::string> present;
  int64_t max_id = -1;
  const auto add = [&](json token) {
    const auto content = token_content(token);
    if (!content || content->empty() || present.count(*content)) return;
    int64_t id;
    if (vocab.contains(*content) && vocab[*content].is_number_integer()) id = vocab[*content].get<int64_t>();
    else id = max_id >= vocab_count ? max_id + 1 : vocab_count;
    token["id"] = id;
    result.push_back(token);
    present.insert(*content);
    max_id = std::max(max_id, id);
  };
  const auto by_id = [](json list) {
    std::stable_sort(list.begin(), list.end(), [](const json& a, const json& b) { return a.value("id", int64_t{0}) < b.value("id", int64_t{0}); });
    return list;
  };
  json file_tokens = file.contains("added_tokens") && file["added_tokens"].is_array() ? file["added_tokens"] : json::array();
  json config_tokens = json::array();
  if (auto it = tokenizer_config.find("added_tokens_decoder"); it != tokenizer_config.end() && it->is_object()) {
    for (auto entry = it->begin(); entry != it->end(); ++entry) {
      if (!entry->is_object()) continue;
      json token = *entry;
      token.erase("__type");
      try {
        size_t used = 0;
        token["id"] = std::stoll(entry.key(), &used);
        if (used != entry.key().size()) throw std::invalid_argument(entry.key());
      } catch (const std::exception&) {
        throw InputError(str(config_file, ": added_tokens_decoder key \"", entry.key(), "\" is not a token id"));
      }
      config_tokens.push_back(token);
    }
  }
  if (kind == Kind::Backend) {
    for (const auto& t : by_id(file_tokens)) add(t);
    for (const auto& t : by_id(config_tokens)) add(t);
  } else {
    for (const auto& t : by_id(tokenizer_config.contains("added_tokens_decoder") ? config_tokens : file_tokens)) add(t);
  }
  // named special tokens: tokenizer_config.json's value, else the class's default (null = none)
  const std::string eot = "<|endoftext|>";
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    std::optional<std::string> content;
    if (auto it = tokenizer_config.find(key); it != tokenizer_config.end()) content = token_content(*it);
    else if (kind == Kind::Qwen2 && (std::string(key) == "unk_token" || std::string(key) == "eos_token" || std::string(key) == "pad_token"))
      content = eot;
    else if (kind == Kind::Gpt2 && (std::string(key) == "unk_token" || std::string(key) == "bos_token" || std::string(key) == "eos_token"))
      content = eot;
    if (content) add(special_entry(*content));
  }
  // model-specific ones ("image_token": "<|img|>", strings only), then the extra special tokens
  static const std::set<std::string> standard = {"bos_token", "eos_token", "unk_token", "sep_token",
                                                 "pad_token", "cls_token", "mask_token"};
  for (auto it = tokenizer_config.begin(); it != tokenizer_config.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0 && !standard.count(key) && it->is_string())
      add(special_entry(it->get<std::string>()));
  }
  json extras = tokenizer_config.value("extra_special_tokens", json());
  if (extras.is_object()) {
    for (const auto& value : extras)
      if (auto content = token_content(value)) add(special_entry(*content));
  } else {
    if (!extras.is_array() || extras.empty()) extras = tokenizer_config.value("additional_special_tokens", json::array());
    if (extras.is_array())
      for (const auto& value : extras)
        if (auto content = token_content(value)) add(special_entry(*content));
  }
  return result;
}

// ---- telling what changed -----------------------------------------------------------------------

std::string regex_name(const std::string& pattern) {
  if (pattern == kQwen2Regex) return "Qwen2's regex (every digit alone)";
  if (pattern == kLlama3Regex) return "Llama 3's regex (digits in threes)";
  if (pattern == kGpt2Regex) return "GPT-2's regex (digit runs kept whole)";
  return str("the regex ", json(pattern).dump());
}

std::string describe_pre_tokenizer(const json& p) {
  if (p.is_null()) return "none";
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    std::string out;
    for (const auto& q : p.value("pretokenizers", json::array())) out += (out.empty() ? "" : ", then ") + describe_pre_tokenizer(q);
    return out;
  }
  if (type == "ByteLevel") {
    std::string out = p.value("use_regex", true) ? "ByteLevel with " + regex_name(kGpt2Regex) : std::string("ByteLevel");
    if (p.value("add_prefix_space", false)) out += " and a prefix space";
    return out;
  }
  if (type == "Split" && p.contains("pattern") && p["pattern"].contains("Regex"))
    return "Split on " + regex_name(p["pattern"]["Regex"].get<std::string>());
  return type;
}

// Only what changes ids (ByteLevel's trim_offsets changes offsets alone).
json pre_tokenizer_ids_view(const json& p) {
  if (!p.is_object()) return nullptr;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    json list = json::array();
    for (const auto& q : p.value("pretokenizers", json::array())) list.push_back(pre_tokenizer_ids_view(q));
    return {{"Sequence", list}};
  }
  if (type == "ByteLevel") return {{"ByteLevel", {p.value("add_prefix_space", false), p.value("use_regex", true)}}};
  json view = p;
  view.erase("trim_offsets");
  return view;
}

std::string describe_normalizer(const json& n) { return n.is_null() ? "none" : n.value("type", std::string("?")); }

std::string flag_text(const json& v) { return v.is_null() ? "null" : v.dump(); }

void compare_pipelines(const json& file, const json& built, std::vector<std::string>& changes) {
  const json none;
  const json& file_pre = file.contains("pre_tokenizer") ? file["pre_tokenizer"] : none;
  if (pre_tokenizer_ids_view(file_pre) != pre_tokenizer_ids_view(built["pre_tokenizer"]))
    changes.push_back(str("pre-tokenizer ", describe_pre_tokenizer(built["pre_tokenizer"]), " instead of tokenizer.json's ",
                          describe_pre_tokenizer(file_pre)));
  const json& file_norm = file.contains("normalizer") ? file["normalizer"] : none;
  if (file_norm != built["normalizer"])
    changes.push_back(str("normalizer ", describe_normalizer(built["normalizer"]), " instead of ", describe_normalizer(file_norm)));
  const json& file_dec = file.contains("decoder") ? file["decoder"] : none;
  if (!file_dec.is_object() || file_dec.value("type", "") != "ByteLevel")
    changes.push_back(str("decoder ByteLevel instead of ", file_dec.is_object() ? file_dec.value("type", std::string("?")) : "none"));
  const json defaults = {{"dropout", nullptr}, {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                         {"byte_fallback", false}, {"ignore_merges", false}};
  const auto unset = [](const json& v) { return v.is_null() || v == json(""); };  // "" and null: no affix
  for (auto it = defaults.begin(); it != defaults.end(); ++it) {
    const json was = file["model"].value(it.key(), it.value());
    const json now = built["model"][it.key()];
    if (was != now && !(unset(was) && unset(now)))
      changes.push_back(str("model.", it.key(), " ", flag_text(now), " instead of ", flag_text(was)));
  }
}

void compare_added_tokens(const json& file_tokens, const json& tokens, std::vector<std::string>& changes) {
  std::vector<std::pair<std::string, int64_t>> before, after;
  for (const auto& t : file_tokens)
    if (auto c = token_content(t)) before.emplace_back(*c, t.value("id", int64_t{-1}));
  for (const auto& t : tokens) after.emplace_back(t["content"].get<std::string>(), t["id"].get<int64_t>());
  std::vector<std::string> notes;
  // Plain pairs, not structured bindings: C++17 lambdas cannot capture a binding (clang refuses).
  for (const auto& token : after) {
    auto was = std::find_if(before.begin(), before.end(), [&](const auto& b) { return b.first == token.first; });
    if (was == before.end()) notes.push_back(str(token.first, " = ", token.second, " added"));
    else if (was->second != token.second) notes.push_back(str(token.first, " = ", token.second, " instead of ", was->second));
  }
  for (const auto& token : before)
    if (std::none_of(after.begin(), after.end(), [&](const auto& a) { return a.first == token.first; }))
      notes.push_back(str(token.first, " (", token.second, ") dropped"));
  if (notes.empty()) return;
  std::string text = "added tokens: ";
  for (size_t i = 0; i < notes.size() && i < 6; ++i) text += (i ? ", " : "") + notes[i];
  if (notes.size() > 6) text += str(" and ", notes.size() - 6, " more");
  changes.push_back(text);
}

}  // namespace

std::string TokenizerPipeline::origin() const { return str(class_name, " (", reason, ")"); }

std::string TokenizerPipeline::change_note() const {
  if (changes.empty()) return "";
  std::string text;
  for (const auto& c : changes) text += (text.empty() ? "" : "; ") + c;
  return str("tokenizer: transformers 5.24 (and so TRL) loads ", origin(), ", which differs from tokenizer.json: ", text,
             ". rayless tokenizes as the class does");
}

TokenizerPipeline resolve_tokenizer_pipeline(const std::string& tokenizer_json_text, const std::string& where,
                                             const std::filesystem::path& dir) {
  TokenizerPipeline out;
  const auto tokenizer_config = dir.empty() ? std::nullopt : read_json_object(dir / "tokenizer_config.json");
  const auto config = dir.empty() ? std::nullopt : read_json_object(dir / "config.json");
  const bool byte_level = tokenizer_json_text.find("\"ByteLevel\"") != std::string::npos;
  const Choice choice = choose_class(tokenizer_config.value_or(json::object()), config.value_or(json::object()),
                                     config.has_value(), byte_level);
  out.class_name = choice.name;
  out.reason = choice.reason;
  inputCheck(choice.kind != Kind::Llama, where, ": transformers 5.24 loads LlamaTokenizer for this directory (", choice.reason,
             "): a SentencePiece-style BPE (Metaspace, byte fallback), which rayless does not support");
  if (!tokenizer_config && choice.kind == Kind::Backend) {  // nothing can change the file
    out.tokenizer_json = tokenizer_json_text;
    return out;
  }
  json file;
  try {
    file = json::parse(tokenizer_json_text);
  } catch (const json::exception& e) {
    throw InputError(str(where, ": invalid JSON: ", e.what()));
  }
  inputCheck(file.is_object() && file.contains("model") && file["model"].is_object(), where, ": no \"model\" object");
  json built = file;
  if (choice.kind != Kind::Backend) {
    const bool prefix_space = tokenizer_config && tokenizer_config->value("add_prefix_space", json()).is_boolean()
                                  ? (*tokenizer_config)["add_prefix_space"].get<bool>()
                                  : false;
    built["normalizer"] = choice.kind == Kind::Qwen2 ? json{{"type", "NFC"}} : json();
    built["pre_tokenizer"] = class_pre_tokenizer(choice.kind, prefix_space);
    built["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    built["model"] = class_model(file["model"]);
    compare_pipelines(file, built, out.changes);
  }
  const json file_tokens = file.contains("added_tokens") && file["added_tokens"].is_array() ? file["added_tokens"] : json::array();
  built["added_tokens"] = added_tokens_after_load(choice.kind, file, tokenizer_config.value_or(json::object()),
                                                  (dir / "tokenizer_config.json").string());
  compare_added_tokens(file_tokens, built["added_tokens"], out.changes);
  out.tokenizer_json = out.changes.empty() ? tokenizer_json_text : built.dump(2);
  return out;
}

}  // namespace rayless
