// The chat template a run renders conversations with, as transformers' apply_chat_template does:
// the model's own Jinja template (chat_template.jinja beside the tokenizer, else tokenizer_config.json's
// "chat_template", a string or a list of named templates), the built-in ChatML, a .jinja file, or an
// inline template. The template sees messages, add_generation_prompt, the special tokens named in
// tokenizer_config.json (bos_token, eos_token, ...) and tokenizer.chat_template_kwargs.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>

namespace rayless {

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // spec (tokenizer.chat_template): "auto" (the model's template; none when it has none), "none",
  // "chatml", the name of one of the model's named templates, a path to a template file (".jinja", or
  // any existing file), an inline Jinja template, or a legacy string with {prompt} (and {system}).
  // tokenizer_dir holds tokenizer_config.json / chat_template.jinja (the model or tokenizer directory).
  // A template that does not parse is an InputError "<source>:<line>: why".
  static ChatTemplate resolve(const std::string& spec, const std::filesystem::path& tokenizer_dir);

  bool is_none() const { return kind_ == Kind::None; }
  // True when the spec named a template explicitly (not auto, not none): plain-text prompts are then wrapped
  // as a user message; under auto they go to the tokenizer as they are, as TRL does.
  bool explicitly_chosen() const { return explicit_ && kind_ != Kind::None; }
  const std::string& source() const { return source_; }  // names the template in messages

  // messages: an array of message objects (role, content, and any other key, in the order given);
  // keys whose value is null are dropped first, as transformers does. kwargs: an object whose keys
  // become template variables (chat_template_kwargs, tools). Errors (raise_exception, a missing
  // template) are InputErrors naming the template source and line.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object()) const;

  // The special-token variables the template sees ({"bos_token": "<s>", ...}).
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  enum class Kind { None, Jinja, Legacy };
  Kind kind_ = Kind::None;
  bool explicit_ = false;
  std::string source_ = "none";
  std::string legacy_format_;                    // Kind::Legacy: text with {prompt} / {system}
  std::shared_ptr<const jinja::Template> jinja_;  // Kind::Jinja
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

// The directory whose tokenizer_config.json / chat_template.jinja belong to the tokenizer in use:
// the directory of tokenizer.path when it names a file, else the model directory.
std::filesystem::path tokenizer_directory(const std::string& tokenizer_path, const std::filesystem::path& model_dir);

// A system prompt (when not empty) and one user message, as a messages array.
nlohmann::ordered_json single_turn_messages(const std::string& system_prompt, const std::string& prompt);

}  // namespace rayless
