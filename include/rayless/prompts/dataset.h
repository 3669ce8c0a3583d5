// Prompt datasets: JSONL files with one JSON object per line. A row holds its prompt either as text
// (data.prompt_field) or as chat messages [{role, content}, ...] (data.messages_field); every other
// field stays in the row and reaches the reward functions (e.g. "answer" for the answer reward).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "rayless/base/choices.h"

namespace rayless {

struct DataConfig;

struct PromptRow {
  std::string prompt;       // text prompt; empty for a chat row
  // chat messages (array of {role, content, ...}, keys in the file's order, which templates' tojson
  // shows); null for a text row
  nlohmann::ordered_json messages;
  nlohmann::json fields;    // the whole JSON object of the line, prompt/messages included
  int64_t line = 0;         // 1-based line number in the file (for messages)
  bool is_chat() const { return !messages.is_null(); }
};

struct PromptDataset {
  std::string path;
  std::vector<PromptRow> rows;
  int64_t skipped_lines = 0;             // bad lines skipped (data.skip_invalid = true)
  std::string first_skip_reason;         // "file:line: why" of the first skipped line
};

// Reads the whole file. Blank lines are ignored. A bad line (not JSON, not an object, neither a
// non-empty string prompt nor a valid messages list) is an InputError "file:line: why", unless
// skip_invalid, then it is counted in skipped_lines. A dataset with no usable row is an InputError;
// a file that cannot be opened one naming `key`, the config key that named it.
PromptDataset load_prompt_dataset(const std::string& path, const std::string& prompt_field = "prompt",
                                  const std::string& messages_field = "messages", bool skip_invalid = false,
                                  const std::string& key = "data.path");
PromptDataset load_prompt_dataset(const DataConfig& config);

// "" when `object` holds a usable prompt, else why not: a non-empty string under prompt_field, or a
// messages list (objects with a string "role"; "content" a string, a list of parts or absent) under
// prompt_field (TRL's conversational rows, {"prompt": [{"role": "user", ...}]}) or messages_field.
// Fills row.prompt or row.messages (not row.fields or row.line).
std::string parse_prompt_row(const nlohmann::json& object, const std::string& prompt_field,
                             const std::string& messages_field, PromptRow& row);

// Applies data.max_prompt_length / data.truncation to a tokenised prompt: returns the ids unchanged
// when they fit; with truncation Left keeps the last max_length ids; with Error throws an
// InputError naming `where` (e.g. "data/demo/prompts.jsonl:12") and the lengths.
std::vector<int64_t> truncate_prompt_ids(const std::vector<int64_t>& ids, int64_t max_length,
                                         PromptTruncation truncation, const std::string& where);

}  // namespace rayless
