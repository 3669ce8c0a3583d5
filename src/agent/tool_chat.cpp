// The chat template's checks and tool-result tokens for tool calling (TRL 1.16's GRPOTrainer and
// trl/chat_template_utils.py: supports_tool_calling, is_chat_template_prefix_preserving,
// _get_tool_suffix_ids).
#include "rayless/agent/tool_chat.h"

#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/prompt_builder.h"

namespace rayless {

using Json = nlohmann::ordered_json;

namespace {

// the sentinels TRL's check looks for: each part of the exchange must reach the rendered text
constexpr const char* kToolName = "tool_name_a8f3e2b1";
constexpr const char* kArgumentKey = "tool_arg_key_b9d4f5c2";
constexpr const char* kArgumentValue = "tool_arg_val_d6e7a9f3";
constexpr const char* kToolContent = "tool_content_c4f9a8e2";

Json dummy_call(const std::string& name, Json arguments) {
  return Json::array({Json{{"type", "function"}, {"function", Json{{"name", name}, {"arguments", std::move(arguments)}}}}});
}

std::string render(const PromptFormat& format, const Json& messages, bool add_generation_prompt, const Json& kwargs) {
  try {
    return format.chat_template.render(messages, add_generation_prompt, kwargs);
  } catch (const InputError& e) {
    throw InputError(str("tools need a chat template that renders tool calls and tool results, and ",
                         format.chat_template.source(), " fails on them: ", e.what()));
  }
}

}  // namespace

std::string check_template_supports_tools(const PromptFormat& format) {
  inputCheck(!format.chat_template.is_none(), "tools and environments need a chat template (tokenizer.chat_template is none"
             " and the model has no template): set tokenizer.chat_template to the model's tool-calling template");
  const Json messages = Json::array({Json{{"role", "user"}, {"content", "hi"}},
                                     Json{{"role", "assistant"}, {"content", ""},
                                          {"tool_calls", dummy_call(kToolName, Json{{kArgumentKey, kArgumentValue}})}},
                                     Json{{"role", "tool"}, {"name", kToolName}, {"content", kToolContent}}});
  const std::string rendered = render(format, messages, false, Json::object());
  for (const char* sentinel : {kToolName, kArgumentKey, kArgumentValue, kToolContent})
    inputCheck(rendered.find(sentinel) != std::string::npos, format.chat_template.source(),
               ": this chat template does not support tool calling (a conversation user -> assistant with tool_calls "
               "-> tool renders without the tool call's ", sentinel == kToolContent ? "result" : "name or arguments",
               "); tools and environments need a template that shows both, e.g. Qwen2.5's or Llama 3.1's");
  return rendered;
}

ToolChat::ToolChat(const PromptFormat& format, std::shared_ptr<const Tokenizer> tokenizer, const std::string& format_name)
    : format_(format),
      tokenizer_(std::move(tokenizer)),
      parser_(format_name == "auto"
                  ? detect_tool_call_format(check_template_supports_tools(format), kToolName, format.chat_template.source())
                  : (check_template_supports_tools(format), tool_call_format_from_name(format_name))) {
  const Json& special = format.chat_template.special_tokens();
  if (special.contains("eos_token") && special["eos_token"].is_string()) {
    eos_token_ = special["eos_token"].get<std::string>();
    if (auto id = tokenizer_->token_to_id(eos_token_)) eos_id_ = *id;
  }
  // prefix-preserving, as TRL requires of multi-turn training (it swaps in a training template where
  // it knows one; rayless asks for it)
  const Json turn = Json::array({Json{{"role", "user"}, {"content", "dummy"}},
                                 Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", dummy_call("dummy", Json::object())}}});
  Json with_tool = turn;
  with_tool.push_back(Json{{"role", "tool"}, {"name", "dummy"}, {"content", "dummy"}});
  const std::vector<int64_t> before = tokenizer_->encode(render(format, turn, false, Json::object()));
  const std::vector<int64_t> after = tokenizer_->encode(render(format, with_tool, true, Json::object()));
  inputCheck(after.size() >= before.size() && std::equal(before.begin(), before.end(), after.begin()),
             format.chat_template.source(),
             ": this chat template is not prefix-preserving (an assistant turn renders differently once a tool "
             "result follows it, as Qwen3's does with its thinking), so a multi-turn completion cannot be extended "
             "token by token; use a training variant that keeps earlier turns as they were (TRL ships them: "
             "trl/chat_templates/*_training.jinja)");
}

std::vector<int64_t> ToolChat::suffix_ids(const Json& tool_messages) const {
  runtimeCheck(tool_messages.is_array() && !tool_messages.empty(), "suffix_ids: no tool messages");
  // the real tool name: some templates (GPT-OSS) write the response header from the call's name
  const Json dummy = Json::array({Json{{"role", "user"}, {"content", "dummy"}},
                                  Json{{"role", "assistant"}, {"content", ""},
                                       {"tool_calls", dummy_call(tool_messages[0]["name"].get<std::string>(), Json::object())}}});
  Json full = dummy;
  for (const Json& m : tool_messages) full.push_back(m);
  std::vector<int64_t> prefix = tokenizer_->encode(render(format_, dummy, false, format_.kwargs));
  const std::vector<int64_t> all = tokenizer_->encode(render(format_, full, true, format_.kwargs));
  // templates that write "<|im_end|>\n" after a turn: cut at the EOS token, not after the newline
  if (eos_id_ >= 0) {
    const auto last = std::find(prefix.rbegin(), prefix.rend(), eos_id_);
    if (last != prefix.rend()) prefix.resize(static_cast<size_t>(prefix.rend() - last));
  }
  runtimeCheck(all.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), all.begin()),
               format_.chat_template.source(), ": the tool-result tokens do not extend the conversation's tokens");
  return std::vector<int64_t>(all.begin() + static_cast<std::ptrdiff_t>(prefix.size()), all.end());
}

Json ToolChat::parse(const std::vector<int64_t>& completion_ids, const std::vector<int64_t>& prefix_ids,
                     const Json& tools) const {
  return parse_assistant_turn(parser_, *tokenizer_, completion_ids, prefix_ids, eos_token_, tools);
}

}  // namespace rayless
