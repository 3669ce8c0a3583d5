#include "rayless/trainer/config_history.h"

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "rayless/base/config.h"
#include "rayless/base/error.h"

namespace rayless {
namespace {

// A value as the user writes it: strings in double quotes, arrays item by item
std::string literal_of(const toml::node& node) {
  if (const auto* text = node.as_string()) return nlohmann::json(text->get()).dump();
  if (const toml::array* items = node.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < items->size(); ++i) out += (i ? ", " : "") + literal_of(*items->get(i));
    return out + "]";
  }
  if (const auto* number = node.as_floating_point()) return float_literal(number->get());
  std::ostringstream literal;
  node.visit([&](auto&& value) { literal << value; });
  return literal.str();
}

// key -> literal of every value in the document, named tables flattened ("reward.workers.a.command")
void flatten(const toml::table& table, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& [key, node] : table) {
    const std::string name = prefix + std::string(key.str());
    if (const toml::table* inner = node.as_table()) {
      flatten(*inner, name + ".", out);
      continue;
    }
    out[name] = literal_of(node);
  }
}

std::map<std::string, std::string> literals(const std::string& text, const std::string& where) {
  toml::table root;
  try {
    root = toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    throw InputError(str(where, ":", e.source().begin.line, ": not a rayless config (", e.description(), ")"));
  }
  std::map<std::string, std::string> out;
  flatten(root, "", out);
  return out;
}

// "reward.workers.*.timeout_s" matches "reward.workers.judge.timeout_s"; "log." a whole section
bool matches(const std::string& pattern, const std::string& key) {
  const size_t star = pattern.find('*');
  if (star == std::string::npos)
    return pattern.back() == '.' ? key.rfind(pattern, 0) == 0 : key == pattern;
  const std::string head = pattern.substr(0, star), tail = pattern.substr(star + 1);
  if (key.size() < head.size() + tail.size() || key.rfind(head, 0) != 0) return false;
  if (key.compare(key.size() - tail.size(), tail.size(), tail) != 0) return false;
  const std::string middle = key.substr(head.size(), key.size() - head.size() - tail.size());
  return !middle.empty() && middle.find('.') == std::string::npos;
}

}  // namespace

std::vector<ConfigChange> config_changes(const std::string& before_toml, const std::string& now_toml,
                                         const std::string& where) {
  const auto before = literals(before_toml, where), now = literals(now_toml, "the config");
  std::vector<ConfigChange> changes;
  for (const auto& [key, value] : now) {
    // a named table only one side has: each of its keys against "(none)"
    const bool named = key.rfind("reward.workers.", 0) == 0 || key.rfind("reward.models.", 0) == 0;
    auto found = before.find(key);
    if (found == before.end()) {
      if (named) changes.push_back({key, "(none)", value});
      continue;
    }
    if (found->second != value) changes.push_back({key, found->second, value});
  }
  for (const auto& [key, value] : before)
    if ((key.rfind("reward.workers.", 0) == 0 || key.rfind("reward.models.", 0) == 0) && !now.count(key))
      changes.push_back({key, value, "(none)"});
  return changes;
}

const std::vector<ResumeFreeKey>& resume_free_keys() {
  static const std::vector<ResumeFreeKey> keys = {
      {"train.max_steps", "how far the run goes (the learning-rate schedule is laid over the new length)"},
      {"train.output_dir", "where the run directory is"},
      {"train.gradient_checkpointing", "the same activations, recomputed in backward"},
      {"train.padding_free", "the same log-probs, without padding"},
      {"train.max_nonfinite_steps", "when a run of non-finite steps stops the run"},
      {"generation.fused_weights", "the same products on packed copies of the weights"},
      {"generation.slots", "the same tokens per row, other rows at once"},
      {"generation.prefill_chunk", "the same prompts, prefilled in other passes"},
      {"generation.sync_interval", "the same tokens per row, the host looking more or less often"},
      {"generation.cuda_graphs", "the same decode step, replayed from a graph or run eagerly"},
      {"agent.keep_kv_cache", "the same later turns, on kept keys and values or prefilled again"},
      {"grpo.logprob_chunk_size", "the same log-probs in other chunks"},
      {"grpo.logprob_sequence_chunk_size", "the same log-probs in other pieces along the sequence"},
      {"grpo.entropy_threshold_method", "the same threshold, found another way"},
      {"model.device", "where the run computes"},
      {"reward.worker_timeout_s", "how long a worker may take"},
      {"reward.worker_batch_size", "how completions are sent to the worker"},
      {"reward.workers.*.timeout_s", "how long a worker may take"},
      {"reward.workers.*.batch_size", "how completions are sent to the worker"},
      {"reward.models.*.batch_size", "how many texts a reward model scores at once"},
      {"checkpoint.", "when checkpoints are written and how many are kept"},
      {"log.", "what is printed and logged"},
      {"eval.", "evaluation does not train"},
      {"distributed.", "transport, threads, timeouts, ZeRO stage"},
  };
  return keys;
}

bool may_change_on_resume(const std::string& key) {
  const auto& free = resume_free_keys();
  return std::any_of(free.begin(), free.end(), [&](const ResumeFreeKey& k) { return matches(k.pattern, key); });
}

void check_resume_changes(const std::vector<ConfigChange>& changes, const std::vector<std::string>& allowed,
                          bool mid_cycle, const std::string& checkpoint) {
  std::string refused;
  for (const ConfigChange& c : changes) {
    if (may_change_on_resume(c.key)) continue;
    if (!mid_cycle && std::find(allowed.begin(), allowed.end(), c.key) != allowed.end()) continue;
    refused += str(refused.empty() ? "" : ", ", c.key, " ", c.before, " -> ", c.now);
  }
  if (refused.empty()) return;
  if (mid_cycle)
    throw InputError(str(checkpoint, " was taken in the middle of a generation cycle or between optimizer steps, "
                                     "where the run's settings cannot change: ",
                         refused, "; resume with the checkpoint's values, or from a checkpoint at a generation boundary"));
  throw InputError(str("--resume ", checkpoint, ": the config changes settings that change the run: ", refused,
                       "; resume with the checkpoint's values, or pass --allow-config-change KEY for each key to "
                       "change it on purpose (docs/hpc.md, Resuming)"));
}

std::string segment_config_name(int64_t optimizer_step) {
  char name[64];
  std::snprintf(name, sizeof name, "config.segment-%08lld.toml", static_cast<long long>(optimizer_step));
  return name;
}

}  // namespace rayless
