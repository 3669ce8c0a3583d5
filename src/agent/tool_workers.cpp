// Tool and environment workers: describe at start, then resets, calls and rewards as JSON lines.
#include "rayless/agent/tool_workers.h"

#include <cmath>
#include <limits>
#include <map>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/base/worker_process.h"

namespace rayless {

using Json = nlohmann::ordered_json;

struct ToolWorkers::Worker {
  WorkerProcess process;
  bool environment;
  Worker(const std::string& command, double timeout_s, int rank, const std::string& who, bool environment)
      : process(command, timeout_s, rank, who), environment(environment) {}
};

namespace {

std::string dump(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"; }

Json answer_object(WorkerProcess& process, const std::string& line, size_t request, const char* expected) {
  std::optional<Json> parsed = parse_answer_line(line);
  if (parsed && parsed->is_object()) return std::move(*parsed);
  process.stop();
  throw InputError(str(process.who(), " answered request ", request + 1, " with \"", one_line_excerpt(line),
                       "\": expected ", expected));
}

}  // namespace

ToolWorkers::ToolWorkers(const Config& config, int rank) {
  for (const auto& [name, t] : config.tools)
    workers_.push_back(std::make_unique<Worker>(t.command, t.timeout_s, rank,
                                                str("tool worker \"", name, "\" (", t.command, ")"), false));
  if (!config.environment.command.empty()) {
    workers_.push_back(std::make_unique<Worker>(config.environment.command, config.environment.timeout_s, rank,
                                                str("environment worker (", config.environment.command, ")"), true));
    environment_ = workers_.back().get();
  }
  for (auto& worker : workers_) {
    WorkerProcess& p = worker->process;
    const Json answer = answer_object(p, p.exchange({dump(Json{{"describe", Json::object()}})})[0], 0,
                                      "{\"tools\": [schema, ...]} (does the command run tools/agent_workers/rayless_agent.py?)");
    if (!answer.contains("tools") || !answer["tools"].is_array()) {
      p.stop();
      throw InputError(str(p.who(), " described itself without a \"tools\" list: ", one_line_excerpt(answer.dump())));
    }
    for (const Json& schema : answer["tools"]) {
      const bool named = schema.is_object() && schema.contains("function") && schema["function"].is_object() &&
                         schema["function"].contains("name") && schema["function"]["name"].is_string();
      inputCheck(named, p.who(), ": a tool schema without function.name: ", one_line_excerpt(schema.dump()));
      const std::string name = schema["function"]["name"].get<std::string>();
      const auto [it, fresh] = by_tool_.emplace(name, worker.get());
      inputCheck(fresh, "two tools are named \"", name, "\": ", it->second->process.who(), " and ", p.who(),
                 " (TRL would keep only the last; rename one)");
      schemas_.push_back(schema);
    }
    if (worker->environment) {
      environment_name_ = answer.value("environment", std::string("environment"));
      environment_reward_ = answer.value("reward", false);
    }
  }
}

ToolWorkers::~ToolWorkers() = default;

std::vector<Json> ToolWorkers::reset(const std::vector<nlohmann::json>& rows, const std::function<std::string(size_t)>& where) {
  runtimeCheck(environment_ != nullptr, "reset without an environment worker");
  std::vector<std::string> lines;
  for (size_t i = 0; i < rows.size(); ++i)
    lines.push_back(dump(Json{{"reset", Json{{"instance", i}, {"row", Json::parse(rows[i].dump())}}}}));
  WorkerProcess& p = environment_->process;
  const auto answers = p.exchange(lines, [&](size_t i) { return str(" (reset of ", where(i), ")"); });
  std::vector<Json> observations;
  for (size_t i = 0; i < answers.size(); ++i) {
    const Json a = answer_object(p, answers[i], i, "{\"observation\": text | null}");
    inputCheck(a.contains("observation"), p.who(), " answered reset of ", where(i), " without \"observation\"");
    observations.push_back(a["observation"]);
  }
  return observations;
}

std::vector<ToolResult> ToolWorkers::run(const std::vector<ToolCall>& calls, const std::function<std::string(size_t)>& where) {
  std::vector<ToolResult> results(calls.size());
  if (calls.empty()) return results;
  // a name no worker serves goes to the first worker, which answers "Tool NAME not found." as TRL does
  std::map<Worker*, std::vector<size_t>> by_worker;
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto it = by_tool_.find(calls[i].name);
    by_worker[it != by_tool_.end() ? it->second : workers_.front().get()].push_back(i);
  }
  for (const auto& entry : by_worker) {
    // named, not a structured binding: the lambda below captures `indices` (C++17 cannot capture a binding)
    Worker* const worker = entry.first;
    const std::vector<size_t>& indices = entry.second;
    std::vector<std::string> lines;
    for (size_t i : indices) {
      Json request{{"call", Json{{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
      if (worker->environment) request["instance"] = calls[i].row;
      lines.push_back(dump(request));
    }
    const auto context = [&](size_t k) {
      return str(" (tool \"", calls[indices[k]].name, "\" called by ", where(calls[indices[k]].row), ")");
    };
    const auto answers = worker->process.exchange(lines, context);
    for (size_t k = 0; k < indices.size(); ++k) {
      const Json a = answer_object(worker->process, answers[k], k, "{\"result\": ..., \"failed\": bool}");
      inputCheck(a.contains("result"), worker->process.who(), " answered", context(k), " without \"result\"");
      ToolResult& r = results[indices[k]];
      r.content = a["result"];
      r.failed = a.value("failed", false);
      r.awaited = a.value("async", false);
    }
  }
  return results;
}

std::vector<double> ToolWorkers::environment_rewards(size_t rows) {
  runtimeCheck(environment_ != nullptr, "rewards without an environment worker");
  Json instances = Json::array();
  for (size_t i = 0; i < rows; ++i) instances.push_back(i);
  WorkerProcess& p = environment_->process;
  const Json a = answer_object(p, p.exchange({dump(Json{{"reward", Json{{"instances", instances}}}})})[0], 0,
                               "{\"rewards\": [number | null, ...]}");
  inputCheck(a.contains("rewards") && a["rewards"].is_array() && a["rewards"].size() == rows, p.who(),
             " answered get_reward with ", one_line_excerpt(a.dump()), ": expected {\"rewards\": [", rows, " numbers]}");
  std::vector<double> out;
  for (const Json& v : a["rewards"]) {
    if (v.is_number()) out.push_back(v.get<double>());
    else if (v.is_boolean()) out.push_back(v.get<bool>() ? 1.0 : 0.0);
    else if (v.is_null()) out.push_back(std::numeric_limits<double>::quiet_NaN());
    else throw InputError(str(p.who(), ": get_reward returned ", v.dump(), ", not a number"));
  }
  return out;
}

}  // namespace rayless
