// A dataset row's prompt as TRL builds it: a plain-text prompt goes through tokenizer.chat_template
// ("none" = as is) and is tokenized with the tokenizer's own special tokens when no template wraps it
// (TRL calls tokenizer(text): a post-processor that adds BOS adds it); a chat row (messages) is
// rendered by the chat template — chatml when chat_template is "none", since messages need one —
// and tokenized as is (the template writes its own specials). Then data.max_prompt_length applies.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rayless/base/choices.h"

namespace rayless {

struct PromptRow;
struct PromptDataset;
struct TokenizerConfig;
class Tokenizer;

struct PromptTokens {
  std::string text;          // what was tokenized (rewards see it)
  std::vector<int64_t> ids;  // after truncation
};

// `where` names the row in errors (file:line). InputError for a prompt longer than max_length
// with truncation Error.
PromptTokens build_prompt(const PromptRow& row, const TokenizerConfig& config, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, const std::string& where);

// Every row as training would use it, before any generation: the prompt built and tokenized as above
// (with data.max_prompt_length under truncation "error") and `check_row` (what the rewards need of
// the row; "" = fine). A bad row is an InputError "file:line: why", or, with skip_invalid, is
// dropped and counted in dataset.skipped_lines. A dataset left with no row is an InputError.
void check_prompt_dataset(PromptDataset& dataset, const TokenizerConfig& config, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, bool skip_invalid,
                          const std::function<std::string(const nlohmann::json&)>& check_row);

}  // namespace rayless
