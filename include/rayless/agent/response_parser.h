// Reading an assistant turn back into a message, tool calls included, as TRL 1.16 does it: TRL sets a
// transformers `response_template` for each known chat template family (trl/chat_template_utils.py)
// and parses every completion with transformers' ResponseParser, then repairs the result (its
// parse_response: EOS suffix dropped, tool calls validated, malformed output decoded as plain text).
//
//   ToolCallFormat::Qwen    Qwen2.5 / Qwen3 / Qwen3-Instruct-2507: <tool_call>{"name": ..., "arguments": ...}</tool_call>,
//                           <think>...</think> as reasoning_content, content up to <|im_end|>
//   ToolCallFormat::Llama3  Llama 3.1 / 3.2: {"name": ..., "parameters": {...}}<|eot_id|>
//
// The parser is the template's regions run over the decoded text (regular expressions in PCRE2, as
// Python's `regex` module reads them): the text after the last assistant-turn anchor of the prompt
// (start_anchor), then the completion.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rayless {

class Tokenizer;

enum class ToolCallFormat { Qwen, Llama3 };

// "qwen" | "llama3"
const char* tool_call_format_name(ToolCallFormat format);

// The format a chat template writes tool calls in, read from how it rendered an assistant message
// calling the tool `tool_name`; InputError naming `source` when that is a format rayless does not
// parse (Qwen3.5's <function=...> XML) or none it knows.
ToolCallFormat detect_tool_call_format(const std::string& rendered, const std::string& tool_name, const std::string& source);
// "auto" (detect), "qwen" or "llama3"
ToolCallFormat tool_call_format_from_name(const std::string& name);

class ResponseParser {
 public:
  explicit ResponseParser(ToolCallFormat format);
  ~ResponseParser();
  ResponseParser(ResponseParser&&) noexcept;
  ResponseParser& operator=(ResponseParser&&) noexcept;

  ToolCallFormat format() const { return format_; }

  // transformers' ResponseParser: `prefix` is the decoded prompt (cut after its last start anchor),
  // `text` the decoded completion. `tools` (the schemas the prompt advertised) type string arguments
  // of tool calls by their parameter's JSON schema ("7" -> 7 for an integer). Throws ParseFailure
  // where transformers raises (a tool call that is not JSON).
  nlohmann::ordered_json parse(const std::string& prefix, const std::string& text,
                               const nlohmann::ordered_json& tools) const;

 private:
  struct Spec;
  ToolCallFormat format_;
  std::unique_ptr<Spec> spec_;
};

// What transformers raises as ValueError/TypeError inside parsing: TRL falls back to plain text.
class ParseFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// TRL's parse_response(tokenizer, ids, prefix, tools): the message {"role": "assistant", "content":
// ..., ["reasoning_content"], ["tool_calls": [{"type": "function", "function": {"name", "arguments"}}]]}
// of one completion. Decodes with special tokens, drops a trailing `eos_token` from the content,
// checks every tool call (a dict with a string name; missing arguments become {}), and on any
// failure returns {"role": "assistant", "content": <completion decoded without special tokens>}
// with no tool calls, which ends the row's tool loop.
nlohmann::ordered_json parse_assistant_turn(const ResponseParser& parser, const Tokenizer& tokenizer,
                                            const std::vector<int64_t>& completion_ids,
                                            const std::vector<int64_t>& prefix_ids, const std::string& eos_token,
                                            const nlohmann::ordered_json& tools);

}  // namespace rayless
