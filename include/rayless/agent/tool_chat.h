// The chat template's part in tool calling, as TRL 1.16's GRPOTrainer uses it:
//   - at start, the template must render a whole tool exchange (user -> assistant with tool_calls ->
//     tool) with the tool's name, arguments and result all visible (TRL's supports_tool_calling), and
//     must be prefix-preserving (a conversation renders the same tokens whatever follows it), else the
//     run is refused with one line naming the template;
//   - the format tool calls are written in comes from how the template renders one (or agent.tool_call_format);
//   - tool results enter the conversation as the tokens the template adds after the assistant's turn
//     (TRL's _get_tool_suffix_ids: a dummy conversation rendered with and without the tool messages,
//     the first cut after its last EOS token), so earlier tokens are never re-tokenized.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rayless/agent/response_parser.h"
#include "rayless/prompts/prompt_builder.h"

namespace rayless {

class Tokenizer;

class ToolChat {
 public:
  // format_name: agent.tool_call_format (auto | qwen | llama3). InputError naming the template when it
  // cannot carry tool calls.
  ToolChat(const PromptFormat& format, std::shared_ptr<const Tokenizer> tokenizer, const std::string& format_name);

  ToolCallFormat format() const { return parser_.format(); }

  // The tokens that follow an assistant turn ending in tool calls when `tool_messages` ([{"role":
  // "tool", "name", "content"}, ...]) answer them, up to and including the next assistant header.
  std::vector<int64_t> suffix_ids(const nlohmann::ordered_json& tool_messages) const;

  // One completion read back as a message (TRL's parse_response): `prefix_ids` is everything before
  // it (the prompt, and earlier turns), `tools` the schemas the prompt advertised.
  nlohmann::ordered_json parse(const std::vector<int64_t>& completion_ids, const std::vector<int64_t>& prefix_ids,
                               const nlohmann::ordered_json& tools) const;

 private:
  PromptFormat format_;  // a copy: the tools are not among its kwargs (TRL renders tool results without them)
  std::shared_ptr<const Tokenizer> tokenizer_;
  ResponseParser parser_;
  std::string eos_token_;       // the tokenizer's eos_token (tokenizer_config.json), "" when it has none
  int64_t eos_id_ = -1;
};

// TRL's supports_tool_calling: the rendered conversation shows the tool's name, argument key and
// value and the tool's answer. Returns the rendered text (for detect_tool_call_format), or throws an
// InputError naming the template.
std::string check_template_supports_tools(const PromptFormat& format);

}  // namespace rayless
