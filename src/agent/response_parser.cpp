// The response templates TRL 1.16 sets for the Qwen and Llama 3 families, run as transformers'
// ResponseParser runs them on a complete text: regions (fields) open at their open pattern and close
// at their close pattern; text outside every explicit region goes to the implicit one (content);
// the earliest delimiter wins, the longer on a tie, an open before a close.
#include "rayless/agent/response_parser.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"

namespace rayless {

namespace {

using Json = nlohmann::ordered_json;

// One compiled pattern, searched as Python's `regex` module searches a str pattern under DOTALL.
class Pattern {
 public:
  explicit Pattern(const std::string& pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_DOTALL, &error_code, &error_offset, nullptr);
    runtimeCheck(code_ != nullptr, "response parser: bad pattern ", pattern);
    match_data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pattern() {
    pcre2_match_data_free(match_data_);
    pcre2_code_free(code_);
  }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;

  struct Match {
    size_t start = 0, end = 0;
    std::map<std::string, std::string> groups;  // named groups that took part
  };
  std::optional<Match> search(const std::string& text, size_t from) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from, 0, match_data_, nullptr);
    if (rc < 0) return std::nullopt;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data_);
    Match m;
    m.start = ovector[0];
    m.end = ovector[1];
    uint32_t count = 0, entry_size = 0;
    PCRE2_SPTR table = nullptr;
    pcre2_pattern_info(code_, PCRE2_INFO_NAMECOUNT, &count);
    pcre2_pattern_info(code_, PCRE2_INFO_NAMEENTRYSIZE, &entry_size);
    pcre2_pattern_info(code_, PCRE2_INFO_NAMETABLE, &table);
    for (uint32_t i = 0; i < count; ++i) {
      const PCRE2_SPTR entry = table + i * entry_size;
      const int group = (entry[0] << 8) | entry[1];
      if (group < rc && ovector[2 * group] != PCRE2_UNSET)
        m.groups[reinterpret_cast<const char*>(entry + 2)] =
            text.substr(ovector[2 * group], ovector[2 * group + 1] - ovector[2 * group]);
    }
    return m;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* match_data_ = nullptr;
};

std::string escaped(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// Python's str.strip(): whitespace as str.isspace() sees it (ASCII and the Unicode spaces).
bool starts_with_space(const std::string& s, size_t at, size_t* length) {
  const unsigned char c = static_cast<unsigned char>(s[at]);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return *length = 1, true;
  static const char* const wide[] = {"\xc2\x85", "\xc2\xa0", "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81", "\xe2\x80\x82",
                                     "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86", "\xe2\x80\x87", "\xe2\x80\x88",
                                     "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f",
                                     "\xe3\x80\x80"};
  for (const char* w : wide) {
    const size_t n = std::char_traits<char>::length(w);
    if (s.compare(at, n, w) == 0) return *length = n, true;
  }
  return false;
}

std::string python_strip(const std::string& s) {
  size_t begin = 0, n = 0;
  while (begin < s.size() && starts_with_space(s, begin, &n)) begin += n;
  size_t end = s.size();
  while (end > begin) {
    bool found = false;
    for (size_t width = 1; width <= 3 && width <= end - begin; ++width)
      if (starts_with_space(s, end - width, &n) && n == width) {
        end -= width;
        found = true;
        break;
      }
    if (!found) break;
  }
  return s.substr(begin, end - begin);
}

// ---- tool-call arguments typed by their JSON schema (transformers' _schema_types / _coerce) -------

std::vector<std::string> schema_types(const Json& schema) {
  std::vector<std::string> types;
  if (!schema.is_object()) return types;
  if (schema.contains("type")) {
    const Json& declared = schema["type"];
    if (declared.is_string()) types.push_back(declared.get<std::string>());
    if (declared.is_array())
      for (const Json& t : declared)
        if (t.is_string()) types.push_back(t.get<std::string>());
  }
  for (const char* union_name : {"anyOf", "oneOf"})
    if (schema.contains(union_name) && schema[union_name].is_array())
      for (const Json& choice : schema[union_name])
        for (const std::string& t : schema_types(choice)) types.push_back(t);
  const bool nullable = schema.contains("nullable") && schema["nullable"].is_boolean() && schema["nullable"].get<bool>();
  if (nullable && std::find(types.begin(), types.end(), "null") == types.end()) types.push_back("null");
  return types;
}

// Python's int(text): optional sign, digits with single underscores between them, spaces around.
std::optional<Json> python_int(const std::string& raw) {
  std::string s = python_strip(raw), digits;
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  bool last_digit = false;
  for (; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      digits += s[i];
      last_digit = true;
    } else if (s[i] == '_' && last_digit && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      last_digit = false;
    } else {
      return std::nullopt;
    }
  }
  if (digits.empty()) return std::nullopt;
  if (digits.size() > 18) return std::nullopt;  // beyond what a JSON integer here holds
  const long long value = std::stoll(digits);
  return Json(negative ? -value : value);
}

// Python's float(text), with NaN and infinities reported as such.
std::optional<double> python_float(const std::string& raw) {
  std::string s = python_strip(raw), cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1])))
      continue;
    cleaned += s[i];
  }
  if (cleaned.empty()) return std::nullopt;
  std::string lower;
  for (char c : cleaned) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string unsigned_part = lower[0] == '+' || lower[0] == '-' ? lower.substr(1) : lower;
  if (unsigned_part == "inf" || unsigned_part == "infinity") return lower[0] == '-' ? -INFINITY : INFINITY;
  if (unsigned_part == "nan") return NAN;
  if (unsigned_part.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return value;
}

Json coerce(const std::string& raw, const std::vector<std::string>& types) {
  for (const std::string& type : types) {
    if (type == "integer") {
      if (auto v = python_int(raw)) return *v;
      const auto number = python_float(raw);
      if (number && std::isfinite(*number) && std::floor(*number) == *number && std::fabs(*number) < 9e18)
        return Json(static_cast<long long>(*number));
    } else if (type == "number") {
      const auto number = python_float(raw);
      if (!number || !std::isfinite(*number)) continue;
      if (std::floor(*number) == *number && raw.find('.') == std::string::npos && std::fabs(*number) < 9e18)
        return Json(static_cast<long long>(*number));
      return Json(*number);
    } else if (type == "boolean") {
      std::string lower;
      for (char c : python_strip(raw)) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "true" || lower == "1") return Json(true);
      if (lower == "false" || lower == "0") return Json(false);
    } else if (type == "null") {
      const std::string s = python_strip(raw);
      if (s == "null" || s == "None") return Json(nullptr);
    } else if (type == "object" || type == "array") {
      try {
        Json decoded = Json::parse(raw);
        if (type == "object" ? decoded.is_object() : decoded.is_array()) return decoded;
      } catch (const nlohmann::json::exception&) {
      }
    }
  }
  return Json(raw);
}

// name -> the `properties` of its parameters, from the advertised tool schemas
std::map<std::string, Json> tool_parameters(const Json& tools) {
  std::map<std::string, Json> out;
  if (!tools.is_array()) return out;
  for (const Json& tool : tools) {
    if (!tool.is_object()) continue;
    const Json& fn = tool.contains("function") ? tool["function"] : tool;
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    Json properties = Json::object();
    if (fn.contains("parameters") && fn["parameters"].is_object() && fn["parameters"].contains("properties") &&
        fn["parameters"]["properties"].is_object())
      properties = fn["parameters"]["properties"];
    out[fn["name"].get<std::string>()] = properties;
  }
  return out;
}

void coerce_tool_calls(Json& value, const std::map<std::string, Json>& parameters) {
  if (value.is_array()) {
    for (Json& item : value) coerce_tool_calls(item, parameters);
    return;
  }
  if (!value.is_object() || !value.contains("function") || !value["function"].is_object()) return;
  Json& fn = value["function"];
  if (!fn.contains("name") || !fn["name"].is_string() || !fn.contains("arguments") || !fn["arguments"].is_object()) return;
  const auto it = parameters.find(fn["name"].get<std::string>());
  if (it == parameters.end() || it->second.empty()) return;
  for (auto& [key, argument] : fn["arguments"].items()) {
    if (!it->second.contains(key)) continue;
    const std::vector<std::string> types = schema_types(it->second[key]);
    if (types.empty()) continue;
    if (argument.is_string()) {
      argument = coerce(argument.get<std::string>(), types);
    } else if (argument.is_array() && std::find(types.begin(), types.end(), "array") == types.end()) {
      for (Json& item : argument)
        if (item.is_string()) item = coerce(item.get<std::string>(), types);
    }
  }
}

}  // namespace

// ---- the templates ------------------------------------------------------------------------------

struct ResponseParser::Spec {
  enum class Content { Text, Json };
  enum class Transform { None, FunctionIsContent, NamedFunction };
  struct Field {
    std::string name;
    std::unique_ptr<Pattern> open, close;  // no open: the implicit region
    Content content = Content::Text;
    bool repeats = false;
    Transform transform = Transform::None;
  };
  std::string start_anchor;
  std::vector<Field> fields;
  int implicit = -1;

  void add(std::string name, const std::string& open, const std::string& close, Content content, bool repeats,
           Transform transform) {
    Field f;
    f.name = std::move(name);
    if (!open.empty()) f.open = std::make_unique<Pattern>(open);
    if (!close.empty()) f.close = std::make_unique<Pattern>(close);
    f.content = content;
    f.repeats = repeats;
    f.transform = transform;
    if (open.empty()) implicit = static_cast<int>(fields.size());
    fields.push_back(std::move(f));
  }
};

const char* tool_call_format_name(ToolCallFormat format) { return format == ToolCallFormat::Qwen ? "qwen" : "llama3"; }

ToolCallFormat detect_tool_call_format(const std::string& rendered, const std::string& tool_name, const std::string& source) {
  inputCheck(rendered.find("<function=" + tool_name) == std::string::npos, source,
             ": this chat template writes tool calls as <function=...> XML (Qwen3.5, Nemotron 3), which rayless "
             "does not parse; tool calling supports the Qwen2.5/Qwen3 <tool_call> JSON and Llama 3.x JSON formats");
  if (rendered.find("<tool_call>\n{\"name\": \"" + tool_name + "\"") != std::string::npos) return ToolCallFormat::Qwen;
  if (rendered.find("{\"name\": \"" + tool_name + "\", \"parameters\": ") != std::string::npos) return ToolCallFormat::Llama3;
  throw InputError(str(source, ": cannot tell how this chat template writes tool calls (neither Qwen's <tool_call> "
                               "JSON nor Llama 3's {\"name\": ..., \"parameters\": ...}); set agent.tool_call_format to "
                               "\"qwen\" or \"llama3\" if it writes one of them"));
}

ToolCallFormat tool_call_format_from_name(const std::string& name) {
  if (name == "qwen") return ToolCallFormat::Qwen;
  if (name == "llama3") return ToolCallFormat::Llama3;
  throw InputError(str("agent.tool_call_format = \"", name, "\": expected auto, qwen or llama3"));
}

ResponseParser::ResponseParser(ToolCallFormat format) : format_(format), spec_(std::make_unique<Spec>()) {
  using C = Spec::Content;
  using T = Spec::Transform;
  if (format == ToolCallFormat::Qwen) {
    spec_->start_anchor = "<|im_start|>assistant\n";
    spec_->add("reasoning_content", escaped("<think>"), "</think>\\s*", C::Text, false, T::None);
    spec_->add("tool_calls", escaped("<tool_call>"), "</tool_call>\\s*", C::Json, true, T::FunctionIsContent);
    spec_->add("content", "", "<\\|im_end\\|>\\s*", C::Text, false, T::None);
  } else {
    spec_->start_anchor = "<|start_header_id|>assistant<|end_header_id|>\n\n";
    spec_->add("tool_calls", "\\{\"name\":\\s*\"(?P<name>[^\"]+)\",\\s*\"parameters\":\\s*", "\\}<\\|eot_id\\|>\\s*",
               C::Json, true, T::NamedFunction);
    spec_->add("content", "", "<\\|eot_id\\|>\\s*", C::Text, false, T::None);
  }
}

ResponseParser::~ResponseParser() = default;
ResponseParser::ResponseParser(ResponseParser&&) noexcept = default;
ResponseParser& ResponseParser::operator=(ResponseParser&&) noexcept = default;

Json ResponseParser::parse(const std::string& prefix, const std::string& text, const Json& tools) const {
  const Spec& spec = *spec_;
  const std::map<std::string, Json> parameters = tool_parameters(tools);
  // the prompt after its last assistant anchor (what the template already wrote of this turn), then the completion
  const size_t anchor = prefix.rfind(spec.start_anchor);
  const std::string buffer =
      (anchor == std::string::npos ? prefix : prefix.substr(anchor + spec.start_anchor.size())) + text;

  Json output = Json::object();
  output["role"] = "assistant";
  int current = spec.implicit;
  bool opened = false;
  std::string body;
  std::map<std::string, std::string> captures;
  size_t pos = 0;

  const auto reset = [&] {
    current = spec.implicit;
    captures.clear();
    body.clear();
    opened = false;
  };
  const auto close_current = [&] {
    if (current < 0 || !opened) return reset();
    const Spec::Field& field = spec.fields[static_cast<size_t>(current)];
    Json value;
    if (field.content == Spec::Content::Text) {
      value = python_strip(body);
    } else {
      try {
        value = Json::parse(body);
      } catch (const nlohmann::json::exception& e) {
        throw ParseFailure(str("json parser could not parse region as JSON: ", e.what()));
      }
    }
    if (field.transform == Spec::Transform::FunctionIsContent) {
      value = Json{{"type", "function"}, {"function", value}};
    } else if (field.transform == Spec::Transform::NamedFunction) {
      const auto name = captures.find("name");
      if (name == captures.end()) throw ParseFailure("transform placeholder '{name}' is not defined");
      value = Json{{"type", "function"}, {"function", Json{{"name", name->second}, {"arguments", value}}}};
    }
    if (!parameters.empty()) coerce_tool_calls(value, parameters);
    if (field.repeats) {
      if (!output.contains(field.name)) output[field.name] = Json::array();
      output[field.name].push_back(std::move(value));
    } else {
      output[field.name] = std::move(value);
    }
    reset();
  };
  const auto accumulate = [&](size_t from, size_t to) {
    if (to <= from || current < 0) return;
    opened = true;
    body.append(buffer, from, to - from);
  };

  while (true) {
    // the delimiters that can fire now: the close of the open explicit region, else every open and
    // the implicit region's close
    struct Candidate {
      bool open;
      int field;
      Pattern::Match m;
    };
    std::optional<Candidate> best;
    const auto consider = [&](bool open, int index, const Pattern& pattern) {
      auto m = pattern.search(buffer, pos);
      if (!m) return;
      const auto key = [](const Candidate& c, const std::string& name) {
        return std::make_tuple(c.m.start, -static_cast<long long>(c.m.end - c.m.start), c.open ? 0 : 1, name);
      };
      Candidate candidate{open, index, *m};
      if (!best || key(candidate, spec.fields[static_cast<size_t>(index)].name) <
                       key(*best, spec.fields[static_cast<size_t>(best->field)].name))
        best = candidate;
    };
    if (current >= 0 && current != spec.implicit) {
      const Spec::Field& f = spec.fields[static_cast<size_t>(current)];
      if (f.close) consider(false, current, *f.close);
    } else {
      for (size_t i = 0; i < spec.fields.size(); ++i)
        if (spec.fields[i].open) consider(true, static_cast<int>(i), *spec.fields[i].open);
      if (spec.implicit >= 0 && spec.fields[static_cast<size_t>(spec.implicit)].close)
        consider(false, spec.implicit, *spec.fields[static_cast<size_t>(spec.implicit)].close);
    }
    if (!best) {
      accumulate(pos, buffer.size());
      pos = buffer.size();
      close_current();
      break;
    }
    accumulate(pos, best->m.start);
    pos = best->m.end;
    if (best->open) {
      close_current();
      current = best->field;
      captures = best->m.groups;
      body.clear();
      opened = true;
    } else {
      const bool had_content = opened;
      for (const auto& [k, v] : best->m.groups) captures[k] = v;
      close_current();
      if (!had_content && best->m.start == best->m.end) break;  // a zero-width close on an empty region
    }
  }
  // fields left empty are dropped (the defaults stay)
  Json kept = Json::object();
  for (auto& [key, value] : output.items()) {
    const bool empty = value.is_null() || ((value.is_array() || value.is_object()) && value.empty()) ||
                       (value.is_string() && value.get<std::string>().empty());
    if (key == "role" || !empty) kept[key] = value;
  }
  return kept;
}

Json parse_assistant_turn(const ResponseParser& parser, const Tokenizer& tokenizer, const std::vector<int64_t>& ids,
                          const std::vector<int64_t>& prefix_ids, const std::string& eos_token, const Json& tools) {
  try {
    Json parsed = parser.parse(tokenizer.decode(prefix_ids, false), tokenizer.decode(ids, false), tools);
    if (parsed.contains("content") && parsed["content"].is_string()) {
      std::string content = parsed["content"].get<std::string>();
      if (!eos_token.empty() && content.size() >= eos_token.size() &&
          content.compare(content.size() - eos_token.size(), eos_token.size(), eos_token) == 0)
        content.resize(content.size() - eos_token.size());
      parsed["content"] = content;
    }
    const bool no_content = !parsed.contains("content") || parsed["content"].is_null() ||
                            (parsed["content"].is_string() && parsed["content"].get<std::string>().empty()) ||
                            (parsed["content"].is_boolean() && !parsed["content"].get<bool>()) ||
                            ((parsed["content"].is_array() || parsed["content"].is_object()) && parsed["content"].empty());
    if (no_content) parsed["content"] = "";
    if (parsed.contains("tool_calls")) {
      Json& calls = parsed["tool_calls"];
      if (!calls.is_null()) {
        if (!calls.is_array()) throw ParseFailure("tool_calls must be a list or None.");
        for (Json& call : calls) {
          if (!call.is_object()) throw ParseFailure("tool_calls[i] must be a dict.");
          Json* fn = &call;
          if (call.contains("function")) {
            if (!call["function"].is_object()) throw ParseFailure("tool_calls[i]['function'] must be a dict.");
            fn = &call["function"];
          }
          if (!fn->contains("name") || !(*fn)["name"].is_string()) throw ParseFailure("tool call name must be a string.");
          if (!fn->contains("arguments") || (*fn)["arguments"].is_null()) (*fn)["arguments"] = Json::object();
        }
      }
    }
    return parsed;
  } catch (const ParseFailure&) {
    return Json{{"role", "assistant"}, {"content", tokenizer.decode(ids, true)}};
  }
}

}  // namespace rayless
