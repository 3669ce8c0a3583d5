#include "rayless/prompts/prompt_builder.h"

#include "rayless/base/config.h"
#include "rayless/base/error.h"
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

void check_prompt_dataset(PromptDataset& dataset, const TokenizerConfig& config, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, bool skip_invalid,
                          const std::function<std::string(const nlohmann::json&)>& check_row) {
  std::vector<PromptRow> kept;
  kept.reserve(dataset.rows.size());
  for (PromptRow& row : dataset.rows) {
    const std::string where = str(dataset.path, ":", row.line);
    std::string problem;
    try {
      build_prompt(row, config, tokenizer, max_length, truncation, where);
      problem = check_row(row.fields);
      if (!problem.empty()) problem = str(where, ": ", problem);
    } catch (const InputError& e) {
      problem = e.what();  // already names file:line
    }
    if (problem.empty()) {
      kept.push_back(std::move(row));
      continue;
    }
    inputCheck(skip_invalid, problem, " (set data.skip_invalid = true to skip bad lines)");
    if (dataset.skipped_lines++ == 0) dataset.first_skip_reason = problem;
  }
  dataset.rows = std::move(kept);
  inputCheck(!dataset.rows.empty(), dataset.path, ": no usable prompt (", dataset.skipped_lines,
             " lines skipped; first: ", dataset.first_skip_reason, ")");
}

}  // namespace rayless
