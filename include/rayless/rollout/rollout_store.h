// The HDF5 rollout store: what each generation step produced, per rank, for inspection and for
// reuse (num_iterations > 1, resume). Layout under a run's rollouts/ directory (docs/rollout-format.md):
//   rank-RRRRR/step-SSSSSSSS.h5   one file per rank and step, group /step_SSSSSSSS with the data
//   rank-RRRRR.h5                 /step_SSSSSSSS -> external links into that rank's step files
//   index.h5 (rank 0)             /step_SSSSSSSS/rank_RRRRR -> external links into the rank files
// Every file is written under a temporary name and renamed, so a crash leaves the previous good
// files intact. Serial HDF5 only: each rank writes its own files.
#pragma once
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rayless {

// 2: every file starts with a checksum block (a 512-byte HDF5 user block) that readers check first
constexpr int64_t kRolloutSchemaVersion = 2;

// One rank's rollouts of one generation step. N completions, T = total completion tokens.
struct Rollouts {
  int64_t step = 0;
  int64_t rank = 0;
  torch::Tensor prompt_ids;          // int64 [P_total]: prompts back to back (no padding)
  torch::Tensor prompt_offsets;      // int64 [N + 1]: completion i's prompt is prompt_ids[o[i]:o[i+1]]
  torch::Tensor completion_ids;      // int64 [T]
  torch::Tensor completion_offsets;  // int64 [N + 1]
  torch::Tensor group_index;         // int64 [N]: which prompt group (global id) each completion belongs to
  torch::Tensor rewards_per_func;    // float64 [N, K] (NaN = no score)
  torch::Tensor rewards;             // float32/float64 [N]: weighted sum
  torch::Tensor advantages;          // float32/float64 [N]
  torch::Tensor old_logps;           // float32/float64 [T] (may be undefined when not computed)
  torch::Tensor entropies;           // float32/float64 [T] (may be undefined)
  torch::Tensor completion_mask;     // bool [T]: 1 = token counts (up to and including EOS)
  torch::Tensor ref_logps;           // float32/float64 [T] when beta > 0, else undefined
  torch::Tensor truncated;           // bool [N]: hit max_completion_length without EOS
  // completions sampled by another engine (generation ranks, a replay file with log-probs): the
  // sampler's log-probs, float32/float64 [T], beside the trainer's old_logps (undefined otherwise)
  torch::Tensor sampling_logps;
  int64_t policy_version = -1;       // optimizer steps done by the policy that sampled them (-1: not recorded)
  // bool [N]: the sampler met a NaN or an infinity in the row's logits and ended it (the trainer's
  // non-finite guard leaves out the steps trained on it); undefined: not recorded (none met)
  torch::Tensor nonfinite_logits;
  // runs with tools or an environment (undefined / empty otherwise):
  torch::Tensor tool_mask;           // bool [T]: 1 = the model wrote the token, 0 = a tool or the environment did
  std::vector<std::string> conversations;  // [N] JSON: messages, turns, tool calls (docs/rollout-format.md)

  int64_t size() const { return group_index.defined() ? group_index.size(0) : 0; }
  // Checks shapes, dtypes and offsets; InputError naming the first problem (`where` prefixes it).
  void validate(const std::string& where = "rollouts") const;
};

// Attributes stored on each step group (and read back).
struct RolloutAttrs {
  int64_t world_size = 1;
  int64_t num_generations = 1;
  std::vector<std::string> reward_names;
  std::vector<double> reward_weights;
  std::string config_hash;
  std::string tokenizer_hash;
  std::string tokenizer;                       // tokenizer path or "byte" (lets inspect decode)
  double entropy_threshold = std::nan("");     // NaN = not known (yet)
  std::map<std::string, double> numbers;       // anything else useful (beta, temperature, ...)
  std::map<std::string, std::string> strings;  // anything else useful (model path, ...)
};

// Zero-padded names: rank_file_name(3) = "rank-00003.h5", step_group_name(12) = "step_00000012".
std::string rank_file_name(int64_t rank);
std::string step_group_name(int64_t step);
std::string step_file_path(const std::string& dir, int64_t rank, int64_t step);

// Writes rollouts.rank's step file, then rewrites its rank file (links to every step file present);
// on rank 0 also rewrites index.h5 for ranks 0 .. attrs.world_size - 1. Overwrites a step written
// before (a resumed run). Errors are RuntimeErrors; nothing already written is damaged.
void write_rollouts(const std::string& dir, const Rollouts& rollouts, const RolloutAttrs& attrs);

// Reads one rank's step back. A non-empty expected hash that differs from the stored one is an
// InputError saying which hash and both values; a missing or corrupt file is an InputError naming it.
Rollouts read_rollouts(const std::string& dir, int64_t step, int64_t rank, const std::string& expected_config_hash,
                       const std::string& expected_tokenizer_hash, RolloutAttrs* attrs = nullptr);

// Sets (or replaces) a numeric attribute of a step already written, e.g. the entropy threshold once
// the loss has computed it. Atomic like the writes.
void set_rollout_attribute(const std::string& dir, int64_t step, int64_t rank, const std::string& name, double value);

// What a file or directory offers to readers such as `rayless inspect`: PATH may be an index, a rank
// file, a step file, a rollouts/ directory or a run directory (holding rollouts/). Missing or
// corrupt -> InputError naming the path.
struct RolloutEntry {
  int64_t step = 0;
  int64_t rank = 0;
  std::string file;   // the HDF5 file to open: the step file itself when it exists (never read via a link)
  std::string group;  // path of the step group inside `file`
};
std::vector<RolloutEntry> list_rollouts(const std::string& path);  // sorted by step, then rank
Rollouts read_rollout_entry(const RolloutEntry& entry, RolloutAttrs* attrs = nullptr);

}  // namespace rayless
