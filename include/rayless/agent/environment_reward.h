// An environment's get_reward() as a reward column, as TRL 1.16 adds it: named after the environment
// class, weight 1, after the reward.functions columns; each rollout scored by its own instance, in
// the state its episode left it.
#pragma once
#include "rayless/rewards/rewards.h"

namespace rayless {

class ToolWorkers;

class EnvironmentReward : public RewardFunction {
 public:
  explicit EnvironmentReward(ToolWorkers& workers) : workers_(workers) {}
  std::string name() const override;
  std::vector<double> score(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                            const std::vector<int64_t>& completion_token_counts,
                            const std::vector<nlohmann::json>& rows) override;
  bool runs_apart() const override { return true; }

 private:
  ToolWorkers& workers_;
};

}  // namespace rayless
