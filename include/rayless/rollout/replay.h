// Replayed rollouts (train.replay_rollouts): instead of sampling, each generation step takes its
// prompts and completions from a JSONL file, one line per (generation step, rank):
//
//   {"step": 0, "rank": 0,
//    "rows": [{"prompt": "..."}, ...],            dataset row of each completion (N of them)
//    "completion_ids": [[12, 7, 258], ...],       N completions, unpadded, as generated
//    "prompt_ids": [[...], ...],                  optional: the prompt tokens the file's writer used;
//                                                  rayless builds its own and refuses a mismatch
//    "shuffle": [3, 0, 2, 1, ...],                optional: the order in which micro-batches take rows
//    "logprobs": [[-1.2, -0.3, -0.01], ...]       optional: the sampler's log-prob of each completion
//                                                  token (null = not scored), as TRL's rollout_func
//                                                  returns them: the completions then count as sampled
//                                                  by another engine (importance_sampling.h)
//    "completion_turns": [[[...], [...]], ...],   tool-calling runs: each row's model turns; rayless runs
//                                                  the tools between them (completion_ids, if given, must
//                                                  then equal what that assembles)
//    "tool_mask": [[1, 1, 0, 0, 1], ...]}          optional: 0 marks completion tokens the model did not
//                                                  write (TRL rollout_func's env_mask), left out of the loss
//
// Everything else (prompt tokens, rewards, advantages, log-probs, masks, loss, updates) is rayless's
// own. This is how whole training steps are checked against TRL (tests/data/trl-steps/), and how a
// user re-trains on completions written elsewhere. Format: docs/rollout-format.md.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rayless {

struct ReplayedGeneration {
  std::vector<nlohmann::json> rows;                  // [N] dataset rows
  std::vector<std::vector<int64_t>> completion_ids;  // [N] unpadded (empty when only turns are given)
  std::vector<std::vector<std::vector<int64_t>>> completion_turns;  // [N][turn] the model's turns, or empty
  std::vector<std::vector<int64_t>> tool_mask;       // [N] 0/1 per completion token, or empty
  std::vector<std::vector<int64_t>> prompt_ids;      // [N] or empty when the file has none
  std::vector<int64_t> shuffle;                      // permutation of 0..N-1, or empty
  std::vector<std::vector<double>> logprobs;         // [N] one per completion token (NaN = null), or empty
  std::string where;                                 // "file:line" for messages
};

class ReplaySource {
 public:
  // Reads and checks the whole file: InputError "file:line: why" for bad JSON, a missing or mistyped
  // field, rows of different lengths, a shuffle that is not a permutation, or a repeated (step, rank).
  explicit ReplaySource(const std::string& path);
  // InputError naming the file when it holds no line for (step, rank).
  const ReplayedGeneration& at(int64_t step, int64_t rank) const;
  const std::string& path() const { return path_; }
  // every line has "logprobs" (a file where some lines have them and others not is refused)
  bool has_logprobs() const { return has_logprobs_; }

 private:
  std::string path_;
  std::map<std::pair<int64_t, int64_t>, ReplayedGeneration> generations_;
  bool has_logprobs_ = false;
};

}  // namespace rayless
