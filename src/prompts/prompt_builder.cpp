#include "rayless/prompts/prompt_builder.h"

#include <algorithm>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/dataset.h"

namespace rayless {

PromptFormat prompt_format_from_config(const TokenizerConfig& config, const std::filesystem::path& model_dir) {
  PromptFormat format;
  format.chat_template = ChatTemplate::resolve(config.chat_template, tokenizer_directory(config.path, model_dir));
  try {
    format.kwargs = nlohmann::ordered_json::parse(config.chat_template_kwargs);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str("tokenizer.chat_template_kwargs: not a table (", e.what(), ")"));
  }
  inputCheck(format.kwargs.is_object(), "tokenizer.chat_template_kwargs must be a table, e.g. { enable_thinking = false }");
  format.system_prompt = config.system_prompt;
  return format;
}

std::string prompt_text(const PromptRow& row, const PromptFormat& format, const std::string& where) {
  const ChatTemplate& tpl = format.chat_template;
  if (!row.is_chat() && !tpl.explicitly_chosen()) return row.prompt;
  const nlohmann::ordered_json messages = row.is_chat() ? row.messages : single_turn_messages(format.system_prompt, row.prompt);
  try {
    return tpl.render(messages, true, format.kwargs);
  } catch (const InputError& e) {
    throw InputError(str(where, ": cannot render the messages with the chat template: ", e.what()));
  }
}

PromptTokens build_prompt(const PromptRow& row, const PromptFormat& format, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, const std::string& where) {
  PromptTokens out;
  out.text = prompt_text(row, format, where);
  std::vector<int64_t> ids = tokenizer.encode(out.text);
  const bool templated = row.is_chat() || format.chat_template.explicitly_chosen();
  if (!templated) ids = tokenizer.add_special_tokens(std::move(ids));  // TRL: tokenizer(text)
  out.ids = truncate_prompt_ids(ids, max_length, truncation, where);
  return out;
}

int64_t check_prompt_dataset(PromptDataset& dataset, const PromptFormat& format, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, bool skip_invalid,
                          const std::function<std::string(const nlohmann::json&)>& check_row) {
  std::vector<PromptRow> kept;
  kept.reserve(dataset.rows.size());
  int64_t longest = 0;
  for (PromptRow& row : dataset.rows) {
    const std::string where = str(dataset.path, ":", row.line);
    std::string problem;
    try {
      const int64_t length = static_cast<int64_t>(build_prompt(row, format, tokenizer, max_length, truncation, where).ids.size());
      problem = check_row(row.fields);
      if (problem.empty()) longest = std::max(longest, length);
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
  return longest;
}

}  // namespace rayless
