#include "rayless/prompts/dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <tuple>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/hash.h"

namespace fs = std::filesystem;

namespace rayless {

namespace {

// A list of {"role": string, "content": string | list of parts | null, ...} messages under `field`.
std::string check_messages(const nlohmann::json& messages, const std::string& field) {
  if (!messages.is_array() || messages.empty())
    return str("field \"", field, "\" must be a non-empty list of {role, content}");
  for (size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    const bool content_ok = !m.is_object() || !m.contains("content") || m["content"].is_string() ||
                            m["content"].is_array() || m["content"].is_null();
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !content_ok)
      return str("field \"", field, "\" item ", i, " must be {\"role\": string, \"content\": string, ...}");
  }
  return "";
}

}  // namespace

std::string parse_prompt_row(const nlohmann::json& object, const std::string& prompt_field,
                             const std::string& messages_field, PromptRow& row) {
  if (!object.is_object()) return "expected a JSON object";
  auto prompt = object.find(prompt_field);
  if (prompt != object.end()) {
    // TRL's conversational format: the prompt itself is the list of messages
    if (prompt->is_array()) {
      const std::string problem = check_messages(*prompt, prompt_field);
      if (problem.empty()) row.messages = nlohmann::ordered_json(*prompt);
      return problem;
    }
    if (!prompt->is_string())
      return str("field \"", prompt_field, "\" must be a string or a list of {role, content} messages");
    row.prompt = prompt->get<std::string>();
    if (row.prompt.empty()) return str("field \"", prompt_field, "\" is empty");
    return "";
  }
  auto messages = object.find(messages_field);
  if (messages == object.end())
    return str("no \"", prompt_field, "\" (a string or a list of messages) and no \"", messages_field, "\" list");
  const std::string problem = check_messages(*messages, messages_field);
  if (problem.empty()) row.messages = nlohmann::ordered_json(*messages);
  return problem;
}

std::string parse_prompt_line(std::string_view text, const std::string& prompt_field, const std::string& messages_field,
                              PromptRow& row) {
  try {
    row.fields = nlohmann::json::parse(text);
    std::string problem = parse_prompt_row(row.fields, prompt_field, messages_field, row);
    if (problem.empty() && row.is_chat()) {  // again with the keys in the file's order, which templates show
      const auto ordered = nlohmann::ordered_json::parse(text);
      const bool in_prompt = ordered.contains(prompt_field) && ordered[prompt_field].is_array();
      row.messages = ordered[in_prompt ? prompt_field : messages_field];
    }
    return problem;
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto colon = what.find("parse error"); colon != std::string::npos) what = what.substr(colon);
    return "not valid JSON (" + what + ")";
  }
}

PromptDataset PromptDataset::open(const std::string& path, const std::string& prompt_field,
                                  const std::string& messages_field, const std::string& key,
                                  const fs::path& fallback_dir) {
  PromptDataset dataset;
  dataset.path_ = path;
  dataset.prompt_field_ = prompt_field;
  dataset.messages_field_ = messages_field;
  std::error_code error;
  std::vector<fs::path> files;
  if (fs::is_directory(path, error)) {
    for (const auto& entry : fs::directory_iterator(path, error))
      if (entry.path().extension() == ".jsonl" && entry.is_regular_file(error)) files.push_back(entry.path());
    inputCheck(!error, path, ": cannot list the prompt dataset directory (", key, "): ", error.message());
    std::sort(files.begin(), files.end());
    inputCheck(!files.empty(), path, ": a directory without *.jsonl files (", key, ")");
  } else {
    files.push_back(path);
  }
  dataset.shard_start_.push_back(0);
  for (const fs::path& file : files) {
    dataset.shards_.push_back(LineIndex::open(file, fallback_dir, key));
    dataset.shard_start_.push_back(dataset.shard_start_.back() + dataset.shards_.back().rows());
  }
  return dataset;
}

int64_t PromptDataset::size() const {
  const int64_t usable = lines() - skipped_lines();
  return limit_ >= 0 ? std::min(usable, limit_) : usable;
}

// Usable row i is the line j with j - (skipped lines <= j) == i, j not skipped: skipped_[k] - k counts
// the usable lines before skipped_[k], so the skipped lines before j are those with skipped_[k] - k <= i.
int64_t PromptDataset::line_of(int64_t i) const {
  runtimeCheck(i >= 0 && i < size(), "prompt dataset ", path_, ": row ", i, " outside 0..", size() - 1);
  int64_t low = 0, high = static_cast<int64_t>(skipped_.size());
  while (low < high) {
    const int64_t mid = (low + high) / 2;
    if (skipped_[static_cast<size_t>(mid)] - mid <= i) low = mid + 1;
    else high = mid;
  }
  return i + low;
}

std::pair<size_t, int64_t> PromptDataset::locate(int64_t line) const {
  const auto after = std::upper_bound(shard_start_.begin(), shard_start_.end(), line);
  const size_t shard = static_cast<size_t>(after - shard_start_.begin()) - 1;
  return {shard, line - shard_start_[shard]};
}

PromptRow PromptDataset::row(int64_t i) const {
  const auto [shard, r] = locate(line_of(i));
  const LineIndex& index = shards_[shard];
  PromptRow row;
  row.line = static_cast<int64_t>(index.entry(r).line);
  const std::string problem = parse_prompt_line(index.read_row(r), prompt_field_, messages_field_, row);
  // checked at start: the file changed under the run without changing its size or modification time
  inputCheck(problem.empty(), index.file().string(), ":", row.line, ": ", problem);
  return row;
}

std::string PromptDataset::where(int64_t i) const {
  const auto [shard, r] = locate(line_of(i));
  return str(shards_[shard].file().string(), ":", shards_[shard].entry(r).line);
}

void PromptDataset::scan(int64_t begin, int64_t end,
                         const std::function<void(int64_t, const PromptRow&, const std::string&, const std::string&)>& visit) const {
  end = std::min(end, lines());
  while (begin < end) {
    // named, not a structured binding: the lambda below captures `shard` (C++17 cannot capture a binding)
    size_t shard = 0;
    int64_t r = 0;
    std::tie(shard, r) = locate(begin);
    const LineIndex& index = shards_[shard];
    const int64_t stop = std::min(end - shard_start_[shard], index.rows());
    index.scan(r, stop, [&](int64_t row_in_shard, int64_t line, std::string_view text) {
      PromptRow row;
      row.line = line;
      const std::string where = str(index.file().string(), ":", line);
      std::string problem = parse_prompt_line(text, prompt_field_, messages_field_, row);
      if (!problem.empty()) problem = str(where, ": ", problem);
      visit(shard_start_[shard] + row_in_shard, row, where, problem);
    });
    begin = shard_start_[shard] + stop;
  }
}

void PromptDataset::skip(std::vector<int64_t> lines, std::string first_reason) {
  skipped_ = std::move(lines);
  first_skip_reason_ = std::move(first_reason);
}

std::string PromptDataset::identity() const {
  std::string out;
  for (const LineIndex& shard : shards_) {
    const FileIdentity& id = shard.identity();
    out += str(shard.file().filename().string(), " ", id.size, " ", id.mtime_ns, " ", id.ends_hash, "\n");
  }
  return out;
}

fs::path PromptDataset::cache_directory() const {
  return shards_.empty() || shards_[0].cache().empty() ? fs::path() : shards_[0].cache().parent_path();
}

std::string PromptDataset::index_note() const {
  if (shards_.empty()) return "no index";
  int64_t built = 0, in_memory = 0;
  for (const LineIndex& shard : shards_) {
    built += shard.built() ? 1 : 0;
    in_memory += shard.cache().empty() ? 1 : 0;
  }
  const std::string what = shards_.size() == 1 ? "index" : str(shards_.size(), " shard indexes");
  if (in_memory > 0) return str(what, " held in memory (neither ", LineIndex::cache_beside(shards_[0].file()).parent_path().string(),
                                " nor the run directory could be written)");
  return str(what, built == 0 ? " reused from " : built == static_cast<int64_t>(shards_.size()) ? " built in " : " partly rebuilt in ",
             cache_directory().string());
}

PromptDataset load_prompt_dataset(const std::string& path, const std::string& prompt_field,
                                  const std::string& messages_field, bool skip_invalid, const std::string& key) {
  PromptDataset dataset = PromptDataset::open(path, prompt_field, messages_field, key);
  std::vector<int64_t> skipped;
  std::string first_reason;
  dataset.scan(0, dataset.lines(), [&](int64_t line, const PromptRow&, const std::string&, const std::string& problem) {
    if (problem.empty()) return;
    inputCheck(skip_invalid, problem, " (set data.skip_invalid = true to skip bad lines)");
    if (skipped.empty()) first_reason = problem;
    skipped.push_back(line);
  });
  dataset.skip(std::move(skipped), std::move(first_reason));
  inputCheck(dataset.size() > 0, path, ": no usable prompt in ", dataset.lines(), " non-blank lines",
             dataset.skipped_lines() ? str(" (", dataset.skipped_lines(), " skipped; first: ", dataset.first_skip_reason(), ")")
                                     : std::string());
  return dataset;
}

PromptDataset load_prompt_dataset(const DataConfig& config) {
  return load_prompt_dataset(config.path, config.prompt_field, config.messages_field, config.skip_invalid);
}

namespace {
constexpr char kCheckMagic[8] = {'R', 'L', 'X', 'C', 'H', 'K', '0', '2'};

fs::path check_record_path(const PromptDataset& dataset, const std::string& fingerprint) {
  const fs::path dir = dataset.cache_directory();
  if (dir.empty()) return {};
  return dir / ("checked-" + fnv1a64_hex(fingerprint + "\n" + dataset.path() + "\n" + dataset.identity()).substr(0, 16) + ".bin");
}
}  // namespace

bool load_check_record(PromptDataset& dataset, const std::string& fingerprint, int64_t& longest_prompt) {
  const fs::path record = check_record_path(dataset, fingerprint);
  if (record.empty()) return false;
  std::ifstream in(record, std::ios::binary);
  if (!in.good()) return false;
  char magic[8];
  uint64_t lines = 0, skipped = 0, reason_bytes = 0;
  int64_t longest = 0;
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(&lines), sizeof lines);
  in.read(reinterpret_cast<char*>(&longest), sizeof longest);
  in.read(reinterpret_cast<char*>(&skipped), sizeof skipped);
  in.read(reinterpret_cast<char*>(&reason_bytes), sizeof reason_bytes);
  if (!in.good() || std::memcmp(magic, kCheckMagic, sizeof magic) != 0 || static_cast<int64_t>(lines) != dataset.lines() ||
      skipped > lines || reason_bytes > (1u << 20))
    return false;
  std::vector<int64_t> skipped_lines(skipped);
  std::string reason(reason_bytes, '\0');
  in.read(reinterpret_cast<char*>(skipped_lines.data()), static_cast<std::streamsize>(skipped * sizeof(int64_t)));
  in.read(reason.data(), static_cast<std::streamsize>(reason_bytes));
  if (!in.good() || !std::is_sorted(skipped_lines.begin(), skipped_lines.end())) return false;
  dataset.skip(std::move(skipped_lines), std::move(reason));
  longest_prompt = longest;
  return true;
}

void save_check_record(const PromptDataset& dataset, const std::string& fingerprint, int64_t longest_prompt) {
  const fs::path record = check_record_path(dataset, fingerprint);
  if (record.empty()) return;
  try {
    write_file_atomically(record, [&](const fs::path& tmp) {
      errno = 0;
      std::ofstream out(tmp, std::ios::binary);
      const uint64_t lines = static_cast<uint64_t>(dataset.lines()), skipped = static_cast<uint64_t>(dataset.skipped_lines()),
                     reason_bytes = dataset.first_skip_reason().size();
      out.write(kCheckMagic, sizeof kCheckMagic);
      out.write(reinterpret_cast<const char*>(&lines), sizeof lines);
      out.write(reinterpret_cast<const char*>(&longest_prompt), sizeof longest_prompt);
      out.write(reinterpret_cast<const char*>(&skipped), sizeof skipped);
      out.write(reinterpret_cast<const char*>(&reason_bytes), sizeof reason_bytes);
      out.write(reinterpret_cast<const char*>(dataset.skipped().data()), static_cast<std::streamsize>(skipped * sizeof(int64_t)));
      out.write(dataset.first_skip_reason().data(), static_cast<std::streamsize>(reason_bytes));
      out.flush();
      ioCheck(out.good(), "cannot write ", tmp.string());
    });
  } catch (const std::exception&) {
    // a cache: without it the next start checks every row again
  }
}

std::vector<int64_t> truncate_prompt_ids(const std::vector<int64_t>& ids, int64_t max_length,
                                         PromptTruncation truncation, const std::string& where) {
  if (static_cast<int64_t>(ids.size()) <= max_length) return ids;
  inputCheck(truncation == PromptTruncation::Left, where, ": prompt has ", ids.size(), " tokens, more than data.max_prompt_length = ",
             max_length, " (raise it or set data.truncation = \"left\")");
  return std::vector<int64_t>(ids.end() - max_length, ids.end());
}

}  // namespace rayless
