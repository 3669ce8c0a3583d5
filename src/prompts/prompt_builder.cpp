#include "rayless/prompts/prompt_builder.h"

#include "rayless/base/config.h"
#include "rayless/model/tokenizer.h"
#include "rayless/prompts/dataset.h"

namespace rayless {

PromptTokens build_prompt(const PromptRow& row, const TokenizerConfig& config, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, const std::string& where) {
  PromptTokens out;
  std::vector<int64_t> ids;
  if (row.is_chat()) {
    std::vector<ChatMessage> messages;
    for (const auto& m : row.messages) messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    out.text = apply_chat_template(config.chat_template == "none" ? "chatml" : config.chat_template, messages);
    ids = tokenizer.encode(out.text);
  } else {
    out.text = format_prompt(config.chat_template, config.system_prompt, row.prompt);
    ids = tokenizer.encode(out.text);
    if (config.chat_template == "none") ids = tokenizer.add_special_tokens(std::move(ids));
  }
  out.ids = truncate_prompt_ids(ids, max_length, truncation, where);
  return out;
}

}  // namespace rayless
