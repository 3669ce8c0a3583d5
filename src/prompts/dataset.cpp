#include "rayless/prompts/dataset.h"

#include <fstream>

#include "rayless/base/config.h"
#include "rayless/base/error.h"

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

PromptDataset load_prompt_dataset(const std::string& path, const std::string& prompt_field,
                                  const std::string& messages_field, bool skip_invalid, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  inputCheck(in.good(), path, ": cannot open prompt dataset (", key, ")");
  PromptDataset dataset;
  dataset.path = path;
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    PromptRow row;
    row.line = line;
    std::string problem;
    try {
      row.fields = nlohmann::json::parse(text);
      problem = parse_prompt_row(row.fields, prompt_field, messages_field, row);
      if (problem.empty() && row.is_chat()) {  // again with the keys in the file's order, which templates show
        const auto ordered = nlohmann::ordered_json::parse(text);
        const bool in_prompt = ordered.contains(prompt_field) && ordered[prompt_field].is_array();
        row.messages = ordered[in_prompt ? prompt_field : messages_field];
      }
    } catch (const nlohmann::json::exception& e) {
      std::string what = e.what();
      if (auto colon = what.find("parse error"); colon != std::string::npos) what = what.substr(colon);
      problem = "not valid JSON (" + what + ")";
    }
    if (problem.empty()) {
      dataset.rows.push_back(std::move(row));
      continue;
    }
    const std::string message = str(path, ":", line, ": ", problem);
    inputCheck(skip_invalid, message, " (set data.skip_invalid = true to skip bad lines)");
    if (dataset.skipped_lines++ == 0) dataset.first_skip_reason = message;
  }
  inputCheck(!dataset.rows.empty(), path, ": no usable prompt in ", line, " lines",
             dataset.skipped_lines ? str(" (", dataset.skipped_lines, " skipped; first: ", dataset.first_skip_reason, ")")
                                   : std::string());
  return dataset;
}

PromptDataset load_prompt_dataset(const DataConfig& config) {
  return load_prompt_dataset(config.path, config.prompt_field, config.messages_field, config.skip_invalid);
}

std::vector<int64_t> truncate_prompt_ids(const std::vector<int64_t>& ids, int64_t max_length,
                                         PromptTruncation truncation, const std::string& where) {
  if (static_cast<int64_t>(ids.size()) <= max_length) return ids;
  inputCheck(truncation == PromptTruncation::Left, where, ": prompt has ", ids.size(), " tokens, more than data.max_prompt_length = ",
             max_length, " (raise it or set data.truncation = \"left\")");
  return std::vector<int64_t>(ids.end() - max_length, ids.end());
}

}  // namespace rayless
