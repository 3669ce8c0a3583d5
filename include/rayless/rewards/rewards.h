// Reward functions: built-ins (length, format, answer, repetition) and external worker processes,
// combined in a RewardSet that scores a batch of completions into rewards_per_func [N, K] (float64,
// NaN = no score; the GRPO core leaves NaN out of sums and statistics). Metric names derive from
// names(): rewards/NAME/mean and rewards/NAME/std.
#pragma once
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rayless/base/choices.h"
#include "rayless/base/error.h"
#include "rayless/base/worker_process.h"

namespace rayless {

struct Config;

// One reward function: scores completions; the vectors all have the same length N.
class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  virtual std::string name() const = 0;
  // One score per completion; NaN = no score.
  virtual std::vector<double> score(const std::vector<std::string>& prompts,
                                    const std::vector<std::string>& completions,
                                    const std::vector<int64_t>& completion_token_counts,
                                    const std::vector<nlohmann::json>& rows) = 0;
  // "" when a dataset row has what this function needs to score it, else why not (checked for every
  // row when the dataset loads, so a bad row stops the run before it trains).
  virtual std::string check_row(const nlohmann::json& row) const { return ""; }
  // true for functions that wait on another process (workers): RewardSet runs them concurrently
  virtual bool runs_apart() const { return false; }
};

// Built-ins, usable on their own (tests, tools). Each is documented in docs/rewards.md.
// -|target - len(completion)|, len in tokens (the counts given) or in Unicode code points.
double length_reward(const std::string& completion, int64_t token_count, int64_t target, LengthUnit unit);
// Fraction of repeated word n-grams, negated: -(1 - distinct / total); 0 when fewer than n words.
double repetition_penalty(const std::string& completion, int64_t ngram);
// exact: trimmed completion == trimmed expected; numeric: the last number in the completion equals
// the expected number (relative tolerance 1e-6). 1 or 0.
double answer_reward(const std::string& completion, const std::string& expected, AnswerMode mode);
// The expected answer of a dataset row as text (a string field as is, a number in JSON form);
// InputError when the row lacks the field.
std::string answer_text(const nlohmann::json& row, const std::string& field);

class RewardSet {
 public:
  // Builds the functions named in config.reward.functions (worker processes start here, one per
  // rank; `rank` goes to the worker as RAYLESS_RANK). Bad settings are InputErrors.
  // Reward models ([reward.models.NAME]) load onto `device` in `dtype`.
  RewardSet(const Config& config, int rank = 0, torch::Device device = torch::kCPU, torch::Dtype dtype = torch::kFloat32);
  ~RewardSet();
  RewardSet(const RewardSet&) = delete;
  RewardSet& operator=(const RewardSet&) = delete;

  const std::vector<std::string>& names() const { return names_; }
  const std::vector<double>& weights() const { return weights_; }  // reward_weights, default 1
  // "" when every function can score completions of this dataset row, else the first reason.
  std::string check_row(const nlohmann::json& row) const;
  size_t size() const { return functions_.size(); }
  // One more column after those of reward.functions (an environment's get_reward, weight 1 as in TRL).
  void add(std::unique_ptr<RewardFunction> function, double weight);

  // A score that was not a finite number (an infinity a function returned, or NaN from a reward
  // model): it counts as no score (NaN), as null does.
  struct NonfiniteScore {
    int64_t row = 0;
    size_t function = 0;
    double value = 0;
  };
  // rows[i] is the dataset row (PromptRow::fields) of completion i -> [N, K] float64. Non-finite
  // scores become NaN; `nonfinite` (when given) lists them.
  torch::Tensor score(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                      const std::vector<int64_t>& completion_token_counts,
                      const std::vector<nlohmann::json>& rows, std::vector<NonfiniteScore>* nonfinite = nullptr);

 private:
  std::vector<std::unique_ptr<RewardFunction>> functions_;
  std::vector<std::string> names_;
  std::vector<double> weights_;
};

// One answer line of the worker protocol (docs/rewards.md): {"reward": x} for one request (batched =
// false, count = 1) or {"rewards": [count values]} for a batch; null, NaN and "NaN" give NaN. None
// when the line is not such an answer (the caller names the worker and the request).
std::optional<std::vector<double>> parse_worker_answer(const std::string& line, size_t count, bool batched);

// A reward worker: a long-running process started with /bin/sh -c COMMAND that reads one JSON
// request per line on stdin and answers one JSON line per request on stdout (protocol in
// docs/rewards.md). Exits, hangs (timeout_s without an answer) and garbage answers are errors that
// name the command; the process is stopped when the object goes away.
class RewardWorker : public RewardFunction {
 public:
  // `name`: its entry in reward.functions ("worker" for reward.worker_command; else the table's name)
  RewardWorker(std::string command, double timeout_s, int64_t batch_size, int rank = 0, std::string name = "worker");
  ~RewardWorker() override;
  std::string name() const override { return name_; }
  std::vector<double> score(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                            const std::vector<int64_t>& completion_token_counts,
                            const std::vector<nlohmann::json>& rows) override;
  bool runs_apart() const override { return true; }
  int pid() const { return process_.pid(); }

 private:
  std::string name_;
  int64_t batch_size_;
  WorkerProcess process_;  // named in errors: reward worker "judge" (python3 judge.py)
};

}  // namespace rayless
