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

PromptCheck check_prompt_rows(const PromptDataset& dataset, int64_t begin, int64_t end, const PromptFormat& format,
                              const Tokenizer& tokenizer, int64_t max_length, PromptTruncation truncation,
                              bool skip_invalid, const std::function<std::string(const nlohmann::json&)>& check_row) {
  PromptCheck check;
  struct Stop {};  // the first bad line, without skip_invalid: no need to read on
  try {
    dataset.scan(begin, end, [&](int64_t line, const PromptRow& row, const std::string& where, const std::string& parse_problem) {
      std::string problem = parse_problem;
      if (problem.empty()) {
        try {
          const auto length = static_cast<int64_t>(build_prompt(row, format, tokenizer, max_length, truncation, where).ids.size());
          problem = check_row(row.fields);
          if (problem.empty()) check.longest_prompt = std::max(check.longest_prompt, length);
          else problem = str(where, ": ", problem);
        } catch (const InputError& e) {
          problem = e.what();  // already names file:line
        }
      }
      if (problem.empty()) return;
      if (!skip_invalid) {
        check.first_error_line = line;
        check.first_error = problem;
        throw Stop{};
      }
      if (check.skipped.empty()) check.first_skip_reason = problem;
      check.skipped.push_back(line);
    });
  } catch (const Stop&) {
  }
  return check;
}

int64_t apply_prompt_check(PromptDataset& dataset, PromptCheck check, bool skip_invalid) {
  if (check.first_error_line >= 0)
    throw InputError(str(check.first_error, skip_invalid ? "" : " (set data.skip_invalid = true to skip bad lines)"));
  dataset.skip(std::move(check.skipped), std::move(check.first_skip_reason));
  inputCheck(dataset.size() > 0, dataset.path(), ": no usable prompt",
             dataset.skipped_lines() > 0 ? str(" (", dataset.skipped_lines(), " lines skipped; first: ", dataset.first_skip_reason(), ")")
                                         : std::string(" (no line that is not blank)"));
  return check.longest_prompt;
}

int64_t check_prompt_dataset(PromptDataset& dataset, const PromptFormat& format, const Tokenizer& tokenizer,
                             int64_t max_length, PromptTruncation truncation, bool skip_invalid,
                             const std::function<std::string(const nlohmann::json&)>& check_row) {
  return apply_prompt_check(dataset, check_prompt_rows(dataset, 0, dataset.lines(), format, tokenizer, max_length, truncation,
                                                skip_invalid, check_row),
                     skip_invalid);
}

}  // namespace rayless
