// A Jinja2 template engine for Hugging Face chat templates: renders them as transformers'
// apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
// the {% generation %} tag, raise_exception, strftime_now, json.dumps-style tojson), with Python's
// printing of values. See src/chat/ for the lexer, parser, values, filters and renderer.
#pragma once
#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <string>

namespace rayless::jinja {

struct RenderOptions {
  std::time_t now = 0;  // what strftime_now formats (local time); 0 = the current time
};

class Template {
 public:
  // Parses `text`; a syntax error is a rayless::InputError "<source_name>:<line>: <why>" (one line).
  Template(const std::string& text, std::string source_name);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (an object: messages, add_generation_prompt, bos_token, eos_token, tools, and
  // any kwargs, key order preserved as given). raise_exception("msg") in the template and run-time
  // errors (unknown filter, calling a non-callable, ...) are InputError "<source_name>:<line>: <message>".
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rayless::jinja
