// The configs of a run's segments, and what a resume may change (docs/hpc.md, "Resuming").
//
// A run directory keeps config.resolved.toml, the config the run started with, and one
// config.segment-SSSSSSSS.toml per resume (SSSSSSSS: the optimizer step the segment started at);
// every checkpoint keeps the config that produced it (config.resolved.toml inside it). A resume
// compares the checkpoint's config with the new one key by key: keys that change the meaning of the
// run are refused unless named with --allow-config-change KEY, in one line naming each key with its
// old and new value; the keys of resume_free_keys() may change freely.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace rayless {

struct ConfigChange {
  std::string key;     // "grpo.num_generations", "reward.workers.judge.command"
  std::string before;  // TOML literals
  std::string now;
};

// Keys whose values differ between two configs written by config_to_toml (`where` names the first
// in errors). A key only one of them has (a key of another rayless version) is not compared.
std::vector<ConfigChange> config_changes(const std::string& before_toml, const std::string& now_toml,
                                         const std::string& where);

// What may change on resume without --allow-config-change: a key ("train.max_steps"), a section
// ("log.") or a named table's key ("reward.workers.*.timeout_s"), each with why it is harmless.
struct ResumeFreeKey {
  std::string pattern;
  std::string why;
};
const std::vector<ResumeFreeKey>& resume_free_keys();
bool may_change_on_resume(const std::string& key);

// InputError, one line, when `changes` holds a key that changes the run and is not in `allowed`; in
// the middle of a generation cycle or of an accumulation no such key may change (the stored
// generation and gradients were made under the old values), allowed or not.
void check_resume_changes(const std::vector<ConfigChange>& changes, const std::vector<std::string>& allowed,
                          bool mid_cycle, const std::string& checkpoint);

// "config.segment-00000004.toml"
std::string segment_config_name(int64_t optimizer_step);

}  // namespace rayless
