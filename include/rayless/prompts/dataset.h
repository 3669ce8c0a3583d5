// Prompt datasets: JSONL files with one JSON object per line, or a directory of such files (its
// *.jsonl shards, in name order, read as one dataset). A row holds its prompt either as text
// (data.prompt_field) or as chat messages [{role, content}, ...] (data.messages_field); every other
// field stays in the row and reaches the reward functions (e.g. "answer" for the answer reward).
//
// Rows are not held in memory: each shard is read through its byte-offset index (line_index.h) and a
// row is parsed when it is used, so a rank's memory does not grow with the dataset (what grows is the
// epoch's order, 8 bytes a row, and the list of skipped lines). Every row is still checked before
// training (check_prompt_rows in prompt_builder.h, split over the ranks by the trainer); the verdict
// is kept beside the index (save_check_record) and reused while neither the files nor the settings
// the check depends on change.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "rayless/base/choices.h"
#include "rayless/prompts/line_index.h"

namespace rayless {

struct DataConfig;

struct PromptRow {
  std::string prompt;       // text prompt; empty for a chat row
  // chat messages (array of {role, content, ...}, keys in the file's order, which templates' tojson
  // shows); null for a text row
  nlohmann::ordered_json messages;
  nlohmann::json fields;    // the whole JSON object of the line, prompt/messages included
  int64_t line = 0;         // 1-based line number in its file (for messages)
  bool is_chat() const { return !messages.is_null(); }
};

class PromptDataset {
 public:
  PromptDataset() = default;
  // Opens `path` (a JSONL file or a directory of *.jsonl shards) through the shards' line indexes,
  // built now where none matches (fallback_dir: where they go when the data's directory cannot be
  // written; empty: none). Parses no row. InputError naming `key` when the path cannot be read, or
  // names a directory without *.jsonl files.
  static PromptDataset open(const std::string& path, const std::string& prompt_field, const std::string& messages_field,
                            const std::string& key, const std::filesystem::path& fallback_dir = {});

  const std::string& path() const { return path_; }
  int64_t lines() const { return shard_start_.empty() ? 0 : shard_start_.back(); }  // non-blank lines, all shards
  int64_t size() const;                  // usable rows: lines() less the skipped ones (at most limit())
  PromptRow row(int64_t i) const;        // usable row i, read from its file and parsed now
  std::string where(int64_t i) const;    // "file:line" of usable row i

  // Non-blank lines [begin, end) of all shards in order, each parsed: visit(line, row, where, problem)
  // with where "file:line" and problem "" or "file:line: why" (not JSON, no usable prompt). Reads
  // sequentially.
  void scan(int64_t begin, int64_t end,
            const std::function<void(int64_t line, const PromptRow& row, const std::string& where,
                                     const std::string& problem)>& visit) const;

  // The lines left out as invalid (sorted indices into lines()) and why the first one was.
  void skip(std::vector<int64_t> lines, std::string first_reason);
  int64_t skipped_lines() const { return static_cast<int64_t>(skipped_.size()); }
  const std::vector<int64_t>& skipped() const { return skipped_; }
  const std::string& first_skip_reason() const { return first_skip_reason_; }
  void limit(int64_t rows) { limit_ = rows; }  // only the first `rows` usable rows (eval.max_samples)

  // What identifies the data for a check record: every shard's name, size, mtime and end bytes.
  std::string identity() const;
  // For the start-up log: "index built beside the data (DIR/.rayless-index)", "... reused ...", "in memory".
  std::string index_note() const;
  // The cache directory of the first shard's index ("" when the index is held in memory).
  std::filesystem::path cache_directory() const;

 private:
  // usable row i -> its line (index into lines())
  int64_t line_of(int64_t i) const;
  // line -> (shard, row in the shard)
  std::pair<size_t, int64_t> locate(int64_t line) const;

  std::string path_, prompt_field_ = "prompt", messages_field_ = "messages";
  std::vector<LineIndex> shards_;
  std::vector<int64_t> shard_start_;  // shards_.size() + 1 cumulative line counts
  std::vector<int64_t> skipped_;      // sorted lines left out
  std::string first_skip_reason_;
  int64_t limit_ = -1;
};

// "" when the line `text` holds a usable prompt row, else why not ("not valid JSON (...)", "expected a
// JSON object", ...). Fills row.fields, row.prompt or row.messages (keys in the file's order); not row.line.
std::string parse_prompt_line(std::string_view text, const std::string& prompt_field, const std::string& messages_field,
                              PromptRow& row);

// "" when `object` holds a usable prompt, else why not: a non-empty string under prompt_field, or a
// messages list (objects with a string "role"; "content" a string, a list of parts or absent) under
// prompt_field (TRL's conversational rows, {"prompt": [{"role": "user", ...}]}) or messages_field.
// Fills row.prompt or row.messages (not row.fields or row.line).
std::string parse_prompt_row(const nlohmann::json& object, const std::string& prompt_field,
                             const std::string& messages_field, PromptRow& row);

// A dataset opened and its every row parsed, in this process (tools and tests; the trainer checks rows
// over its ranks). A bad line (not JSON, not an object, neither a non-empty string prompt nor a valid
// messages list) is an InputError "file:line: why", unless skip_invalid, then it is skipped and
// counted. A dataset with no usable row is an InputError; a path that cannot be opened one naming
// `key`, the config key that named it.
PromptDataset load_prompt_dataset(const std::string& path, const std::string& prompt_field = "prompt",
                                  const std::string& messages_field = "messages", bool skip_invalid = false,
                                  const std::string& key = "data.path");
PromptDataset load_prompt_dataset(const DataConfig& config);

// Check records: the outcome of checking every row (the skipped lines, the first reason and the
// longest prompt in tokens), kept in the index's cache directory under a name made of `fingerprint`
// (what the check depends on: settings, tokenizer, template) and the data's identity.
// load_check_record applies a matching record and says whether there was one; save_check_record
// writes it (best effort: nothing when it cannot).
bool load_check_record(PromptDataset& dataset, const std::string& fingerprint, int64_t& longest_prompt);
void save_check_record(const PromptDataset& dataset, const std::string& fingerprint, int64_t longest_prompt);

// Applies data.max_prompt_length / data.truncation to a tokenised prompt: returns the ids unchanged
// when they fit; with truncation Left keeps the last max_length ids; with Error throws an
// InputError naming `where` (e.g. "data/demo/prompts.jsonl:12") and the lengths.
std::vector<int64_t> truncate_prompt_ids(const std::vector<int64_t>& ids, int64_t max_length,
                                         PromptTruncation truncation, const std::string& where);

}  // namespace rayless
