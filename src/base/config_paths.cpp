#include "rayless/base/config_paths.h"

#include "rayless/base/error.h"

namespace fs = std::filesystem;

namespace rayless {

namespace {
// tokenizer.chat_template is a file only when it says so: a name of the model's templates, inline
// Jinja and the built-ins are not paths
bool names_template_file(const std::string& spec) {
  return spec.size() > 6 && spec.compare(spec.size() - 6, 6, ".jinja") == 0 && spec.find('{') == std::string::npos &&
         spec.find('\n') == std::string::npos;
}
}  // namespace

void for_each_config_path(Config& c,
                          const std::function<void(const std::string&, std::string&, PathKind)>& fn) {
  auto optional = [&](const std::string& key, std::string& value, PathKind kind) {
    if (!value.empty()) fn(key, value, kind);
  };
  fn("model.path", c.model.path, PathKind::Directory);
  if (c.tokenizer.path != "byte") optional("tokenizer.path", c.tokenizer.path, PathKind::File);
  if (names_template_file(c.tokenizer.chat_template)) fn("tokenizer.chat_template", c.tokenizer.chat_template, PathKind::File);
  fn("data.path", c.data.path, PathKind::File);
  optional("eval.path", c.eval.path, PathKind::File);
  fn("train.output_dir", c.train.output_dir, PathKind::Output);
  optional("train.replay_rollouts", c.train.replay_rollouts, PathKind::File);
  for (auto& [name, model] : c.reward.models) {
    optional(str("reward.models.", name, ".path"), model.path, PathKind::Directory);
    optional(str("reward.models.", name, ".tokenizer"), model.tokenizer, PathKind::File);
  }
}

void resolve_config_paths(Config& config, const fs::path& base_dir,
                          const std::function<bool(const std::string&)>& written) {
  const fs::path base = fs::absolute(base_dir);
  for_each_config_path(config, [&](const std::string& key, std::string& value, PathKind) {
    if (written(key) && fs::path(value).is_relative()) value = (base / value).lexically_normal().string();
  });
}

std::vector<std::string> missing_config_paths(const Config& config) {
  std::vector<std::string> problems;
  Config copy = config;  // for_each_config_path hands out mutable values
  for_each_config_path(copy, [&](const std::string& key, std::string& value, PathKind kind) {
    if (kind == PathKind::Output) return;
    std::error_code error;
    const fs::file_status status = fs::status(value, error);
    const bool want_directory = kind == PathKind::Directory;
    if (!fs::exists(status))
      problems.push_back(str(key, " = \"", value, "\": no such ", want_directory ? "directory" : "file"));
    else if (want_directory != fs::is_directory(status))
      problems.push_back(str(key, " = \"", value, "\": ", want_directory ? "not a directory" : "a directory, not a file"));
  });
  return problems;
}

}  // namespace rayless
