#include "rayless/prompts/chat_template.h"

#include <map>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/chat/jinja.h"

namespace rayless {

namespace {

// Generic ChatML (<|im_start|>role\ncontent<|im_end|>\n per message), written as a Jinja template so
// that every template goes through one renderer.
constexpr const char* kChatml =
    "{% for message in messages %}"
    "{{ '<|im_start|>' ~ message['role'] ~ '\\n' ~ message['content'] ~ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// The special tokens transformers hands every template (its special_tokens_map): the named ones in
// tokenizer_config.json, as strings (an AddedToken object gives its "content").
nlohmann::ordered_json special_tokens_of(const nlohmann::ordered_json& tokenizer_config) {
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto it = tokenizer_config.find(key);
    if (it == tokenizer_config.end()) continue;
    if (it->is_string()) tokens[key] = *it;
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) tokens[key] = (*it)["content"];
  }
  return tokens;
}

nlohmann::ordered_json read_tokenizer_config(const std::filesystem::path& file) {
  if (file.empty() || !std::filesystem::exists(file)) return nlohmann::ordered_json::object();
  try {
    auto j = nlohmann::ordered_json::parse(read_text_file(file));
    inputCheck(j.is_object(), file.string(), ": expected a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(file.string(), ": invalid JSON: ", e.what()));
  }
}

struct NamedTemplate {
  std::string text;
  std::string source;  // a file, or "tokenizer_config.json" (with the name when there are several)
};

// The model's templates by name, as transformers loads them: chat_template.jinja ("default") and
// additional_chat_templates/NAME.jinja win over tokenizer_config.json's "chat_template" (a string,
// or a list of {name, template}).
std::map<std::string, NamedTemplate> model_templates(const std::filesystem::path& dir,
                                                     const nlohmann::ordered_json& tokenizer_config) {
  std::map<std::string, NamedTemplate> templates;
  if (dir.empty()) return templates;
  const auto file = dir / "chat_template.jinja";
  if (std::filesystem::exists(file)) templates["default"] = {read_text_file(file), file.string()};
  const auto extra_dir = dir / "additional_chat_templates";
  if (std::filesystem::is_directory(extra_dir))
    for (const auto& entry : std::filesystem::directory_iterator(extra_dir))
      if (entry.path().extension() == ".jinja")
        templates[entry.path().stem().string()] = {read_text_file(entry.path()), entry.path().string()};
  if (!templates.empty()) return templates;
  const std::string config_file = (dir / "tokenizer_config.json").string();
  auto it = tokenizer_config.find("chat_template");
  if (it == tokenizer_config.end() || it->is_null()) return templates;
  if (it->is_string()) {
    templates["default"] = {it->get<std::string>(), config_file};
    return templates;
  }
  inputCheck(it->is_array(), config_file, ": chat_template must be a string or a list of {name, template}");
  for (const auto& entry : *it) {
    inputCheck(entry.is_object() && entry.contains("name") && entry["name"].is_string() && entry.contains("template") &&
                   entry["template"].is_string(),
               config_file, ": chat_template list items must be {\"name\": string, \"template\": string}");
    const std::string name = entry["name"].get<std::string>();
    templates[name] = {entry["template"].get<std::string>(), str(config_file, " (chat_template \"", name, "\")")};
  }
  return templates;
}

bool looks_like_jinja(const std::string& text) {
  return text.find("{{") != std::string::npos || text.find("{%") != std::string::npos;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size())) text.replace(p, from.size(), to);
  return text;
}

// messages as transformers normalises them: a list of objects, null-valued keys dropped.
nlohmann::ordered_json normalized_messages(const nlohmann::ordered_json& messages) {
  inputCheck(messages.is_array() && !messages.empty(), "a conversation must be a non-empty list of messages");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    inputCheck(m.is_object(), "chat messages must be objects {role, content, ...}");
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (const auto& [key, value] : m.items())
      if (!value.is_null()) kept[key] = value;
    out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace

std::filesystem::path tokenizer_directory(const std::string& tokenizer_path, const std::filesystem::path& model_dir) {
  if (tokenizer_path.empty() || tokenizer_path == "byte") return model_dir;
  return std::filesystem::path(tokenizer_path).parent_path();
}

nlohmann::ordered_json single_turn_messages(const std::string& system_prompt, const std::string& prompt) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
  messages.push_back({{"role", "user"}, {"content", prompt}});
  return messages;
}

ChatTemplate ChatTemplate::resolve(const std::string& spec, const std::filesystem::path& tokenizer_dir) {
  ChatTemplate t;
  const auto config_file = tokenizer_dir.empty() ? std::filesystem::path() : tokenizer_dir / "tokenizer_config.json";
  const nlohmann::ordered_json tokenizer_config = read_tokenizer_config(config_file);
  t.special_tokens_ = special_tokens_of(tokenizer_config);
  t.explicit_ = spec != "auto";
  if (spec == "none") return t;
  std::string text;
  const auto templates = model_templates(tokenizer_dir, tokenizer_config);
  if (spec == "auto") {
    if (templates.empty()) return t;
    inputCheck(templates.count("default"), templates.begin()->second.source,
               ": the model has several chat templates and none named \"default\": set tokenizer.chat_template to one of them");
    text = templates.at("default").text;
    t.source_ = templates.at("default").source;
  } else if (spec == "chatml") {
    text = kChatml;
    t.source_ = "chatml (built in)";
  } else if (templates.count(spec)) {
    text = templates.at(spec).text;
    t.source_ = templates.at(spec).source;
  } else if (looks_like_jinja(spec)) {
    text = spec;
    t.source_ = "tokenizer.chat_template (inline)";
  } else if (spec.find("{prompt}") != std::string::npos) {
    t.kind_ = Kind::Legacy;
    t.legacy_format_ = spec;
    t.source_ = "tokenizer.chat_template (a {prompt} string)";
    return t;
  } else {
    const std::filesystem::path file(spec);
    inputCheck(std::filesystem::is_regular_file(file), "tokenizer.chat_template = \"", spec,
               "\": not auto, none, chatml, a template name of the model, an existing template file, "
               "an inline Jinja template or a string with {prompt}");
    text = read_text_file(file);
    t.source_ = file.string();
  }
  t.kind_ = Kind::Jinja;
  t.jinja_ = std::make_shared<const jinja::Template>(text, t.source_);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& kwargs) const {
  inputCheck(kind_ != Kind::None, "messages need a chat template, and there is none (tokenizer.chat_template = ",
             explicit_ ? "none" : "auto and the model has no chat_template",
             "): set tokenizer.chat_template to chatml, a .jinja file or a template");
  const nlohmann::ordered_json normalized = normalized_messages(messages);
  if (kind_ == Kind::Legacy) {
    std::string user, system;
    for (const auto& m : normalized) {
      const std::string content = m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : "";
      if (m.value("role", "") == "user") user = content;
      if (m.value("role", "") == "system") system = content;
    }
    return replace_all(replace_all(legacy_format_, "{system}", system), "{prompt}", user);
  }
  // transformers renders messages, tools and documents (None when not given: `tools is defined` holds),
  // add_generation_prompt, and {**special_tokens_map, **kwargs}
  nlohmann::ordered_json context = special_tokens_;
  inputCheck(kwargs.is_object(), "tokenizer.chat_template_kwargs must be a table");
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  for (const auto& [key, value] : kwargs.items()) context[key] = value;
  context["messages"] = normalized;
  context["add_generation_prompt"] = add_generation_prompt;
  return jinja_->render(context);
}

}  // namespace rayless
