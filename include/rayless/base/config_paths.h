// The config keys that name files or directories. A relative path written in a config file is
// relative to the directory of that file, so a config works from any working directory (a job
// submitted elsewhere, a launcher run from /tmp); a relative path given with --set, and a default,
// is relative to the working directory, as on any command line. load_config makes them all
// absolute, so the resolved config (config show, config.resolved.toml) means the same anywhere.
// docs/config.md, "Paths".
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "rayless/base/config.h"

namespace rayless {

enum class PathKind { File, Directory, Output };  // Output: written by the run, need not exist yet

// Calls fn(key, value, kind) for every key of `config` that holds a path now: model.path,
// tokenizer.path (unless "" or "byte"), tokenizer.chat_template when it names a .jinja file,
// data.path, eval.path, train.output_dir, train.replay_rollouts, reward.models.NAME.path and
// .tokenizer (empty optional ones are skipped). fn may change the value.
void for_each_config_path(Config& config,
                          const std::function<void(const std::string& key, std::string& value, PathKind kind)>& fn);

// Makes each relative path of a key for which `written(key)` holds relative to `base_dir` instead
// (absolute, normalised); the others (defaults, --set) stay as they are.
void resolve_config_paths(Config& config, const std::filesystem::path& base_dir,
                          const std::function<bool(const std::string& key)>& written);

// One line per path key that names nothing, or a file where a directory belongs (or the reverse):
// `data.path = "/x/p.jsonl": no such file`. train.output_dir is not checked (the run makes it).
std::vector<std::string> missing_config_paths(const Config& config);

}  // namespace rayless
