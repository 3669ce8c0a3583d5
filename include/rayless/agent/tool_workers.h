// The processes that run tools and environments for a rollout, as TRL's GRPOTrainer runs its `tools`
// and `environment_factory` in its own process: one worker per [tools.NAME] table and one for
// [environment], started once per rank (base/worker_process.h), speaking the JSON-line protocol of
// tools/agent_workers/rayless_agent.py (docs/tools.md).
//
// At start each worker describes itself: its tools' JSON schemas (what the chat template's `tools`
// variable shows the model: the [tools.NAME] workers' functions in table-name order, then the
// environment's methods, as TRL lists `tools + methods`) and, for the environment, its class name
// and whether it has get_reward. Environment instance i belongs to row i of this rank's batch.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace rayless {

struct Config;
class WorkerProcess;

struct ToolCall {
  size_t row = 0;  // the rollout making the call (and its environment instance)
  std::string name;
  nlohmann::ordered_json arguments;
};

struct ToolResult {
  nlohmann::ordered_json content;  // the tool message's content: str(result), or a list of content parts
  bool failed = false;             // the tool raised, or no tool has that name (TRL's failure count)
  bool awaited = false;            // an async tool: TRL appends its result after the row's other results
};

class ToolWorkers {
 public:
  // Starts and describes every worker; InputError for a bad description or two tools of one name.
  ToolWorkers(const Config& config, int rank);
  ~ToolWorkers();
  ToolWorkers(const ToolWorkers&) = delete;
  ToolWorkers& operator=(const ToolWorkers&) = delete;

  const nlohmann::ordered_json& schemas() const { return schemas_; }  // [{"type": "function", ...}, ...]
  bool has_environment() const { return environment_ != nullptr; }
  const std::string& environment_name() const { return environment_name_; }  // its class name
  bool environment_has_reward() const { return environment_reward_; }

  // reset(**row) of instance i for row i: the observation (a string, a list of parts, or null).
  // `where(i)` names row i in errors ("data.jsonl:12").
  std::vector<nlohmann::ordered_json> reset(const std::vector<nlohmann::json>& rows,
                                            const std::function<std::string(size_t row)>& where);
  // Runs the calls (results in the same order). A call to a name no worker serves is answered as TRL
  // answers it ("Tool NAME not found.", failed). A worker that dies or exceeds its timeout_s stops the
  // run: RuntimeError naming the tool, the worker and the row.
  std::vector<ToolResult> run(const std::vector<ToolCall>& calls, const std::function<std::string(size_t row)>& where);
  // get_reward() of instances 0 .. rows - 1 (NaN where it returned None).
  std::vector<double> environment_rewards(size_t rows);

 private:
  struct Worker;
  std::vector<std::unique_ptr<Worker>> workers_;  // the [tools.NAME] workers, then the environment's
  Worker* environment_ = nullptr;
  nlohmann::ordered_json schemas_ = nlohmann::ordered_json::array();
  std::map<std::string, Worker*> by_tool_;
  std::string environment_name_;
  bool environment_reward_ = false;
};

}  // namespace rayless
