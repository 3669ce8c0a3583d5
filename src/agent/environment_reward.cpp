#include "rayless/agent/environment_reward.h"

#include "rayless/agent/tool_workers.h"

namespace rayless {

std::string EnvironmentReward::name() const { return workers_.environment_name(); }

// Rollout i ran on environment instance i (ToolWorkers): the batch scored is the batch just rolled out.
std::vector<double> EnvironmentReward::score(const std::vector<std::string>&, const std::vector<std::string>& completions,
                                             const std::vector<int64_t>&, const std::vector<nlohmann::json>&) {
  return workers_.environment_rewards(completions.size());
}

}  // namespace rayless
