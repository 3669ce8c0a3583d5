// A dataset row's prompt as TRL builds it. A chat row (messages) is rendered by the chat template
// with the generation prompt and tokenized as is (the template writes its own BOS): TRL's
// apply_chat_template(..., add_generation_prompt=True, tokenize=True). A plain-text prompt goes to
// the tokenizer as it is, with the post-processor's special tokens (TRL's tokenizer(text): a BOS when
// the tokenizer adds one) — unless tokenizer.chat_template names a template explicitly, which then
// wraps the text as a user message (after tokenizer.system_prompt, if any). Then
// data.max_prompt_length applies.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "rayless/base/choices.h"
#include "rayless/prompts/chat_template.h"

namespace rayless {

struct PromptRow;
class PromptDataset;
struct TokenizerConfig;
class Tokenizer;

// How prompts become text: tokenizer.chat_template resolved, its kwargs, the system prompt.
struct PromptFormat {
  ChatTemplate chat_template;
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // tokenizer.chat_template_kwargs
  std::string system_prompt;
};

// model_dir: where the model's tokenizer_config.json / chat_template.jinja are looked for (unless
// tokenizer.path names a tokenizer.json elsewhere: then beside it).
PromptFormat prompt_format_from_config(const TokenizerConfig& config, const std::filesystem::path& model_dir);

struct PromptTokens {
  std::string text;          // what was tokenized (rewards see it)
  std::vector<int64_t> ids;  // after truncation
};

// The text a row's prompt becomes (before tokenization). `where` names the row in errors.
std::string prompt_text(const PromptRow& row, const PromptFormat& format, const std::string& where);

// `where` names the row in errors (file:line). InputError for a prompt longer than max_length
// with truncation Error, or for messages the template cannot render.
PromptTokens build_prompt(const PromptRow& row, const PromptFormat& format, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, const std::string& where);

// What checking lines of a dataset found: the first bad line and why, or (skip_invalid) every bad
// line and why the first one was.
struct PromptCheck {
  int64_t first_error_line = -1;  // index into dataset.lines(); -1: none
  std::string first_error;        // "file:line: why"
  std::vector<int64_t> skipped;   // with skip_invalid, in order
  std::string first_skip_reason;
  int64_t longest_prompt = 0;     // the longest prompt of the usable lines, in tokens (after truncation)
};

// Lines [begin, end) of `dataset` as training would use them, before any generation: the row parsed,
// its prompt built and tokenized as above (with data.max_prompt_length under truncation "error") and
// `check_row` (what the rewards need of the row; "" = fine). Without skip_invalid it stops at the
// first bad line. Reads the lines sequentially; keeps no row.
PromptCheck check_prompt_rows(const PromptDataset& dataset, int64_t begin, int64_t end, const PromptFormat& format,
                              const Tokenizer& tokenizer, int64_t max_length, PromptTruncation truncation,
                              bool skip_invalid, const std::function<std::string(const nlohmann::json&)>& check_row);

// check_prompt_rows over every line in this process, applied: the first bad line is an InputError
// "file:line: why", or, with skip_invalid, the bad lines are skipped and counted. A dataset left with
// no row is an InputError. Returns the longest prompt kept, in tokens (after truncation).
int64_t check_prompt_dataset(PromptDataset& dataset, const PromptFormat& format, const Tokenizer& tokenizer,
                          int64_t max_length, PromptTruncation truncation, bool skip_invalid,
                          const std::function<std::string(const nlohmann::json&)>& check_row);
// Applies a check's outcome to `dataset` (the InputError, or the skipped lines; no usable row left is
// an InputError). Returns the check's longest prompt.
int64_t apply_prompt_check(PromptDataset& dataset, PromptCheck check, bool skip_invalid);

}  // namespace rayless
