// TRL 1.16's tool-call loop over one rank's batch of rollouts.
#include "rayless/agent/agent_rollout.h"

#include <algorithm>

#include "rayless/agent/tool_chat.h"
#include "rayless/agent/tool_workers.h"
#include "rayless/base/error.h"

namespace rayless {

using Json = nlohmann::ordered_json;

namespace {

void add_turn(AgentRollout& r, const char* by, size_t length) {
  const size_t start = r.completion_ids.size() - length;
  if (length > 0) r.turns.push_back(Json{{"by", by}, {"start", start}, {"end", r.completion_ids.size()}});
}

Json tool_calls_of(const Json& message) {
  return message.is_object() && message.contains("tool_calls") && message["tool_calls"].is_array() &&
                 !message["tool_calls"].empty()
             ? message["tool_calls"]
             : Json();
}

}  // namespace

Json AgentRollout::record() const {
  Json annotated = messages;
  for (size_t i = 0; i < annotated.size() && i < failed.size(); ++i)
    if (failed[i]) annotated[i]["failed"] = true;
  return Json{{"messages", annotated}, {"turns", turns}, {"tool_calls", tool_calls}, {"tool_failures", tool_failures}};
}

std::vector<AgentRollout> run_tool_loop(const ToolChat& chat, ToolWorkers& workers, const Json& tools,
                                        const std::vector<std::vector<int64_t>>& prompt_ids, TurnOutput first,
                                        const GenerateTurn& generate, const AgentLimits& limits,
                                        const std::function<std::string(size_t)>& where) {
  const size_t n = prompt_ids.size();
  runtimeCheck(first.ids.size() == n, "tool loop: ", first.ids.size(), " first turns for ", n, " prompts");
  const bool with_logprobs = first.logprobs.size() == n;
  std::vector<AgentRollout> out(n);
  std::vector<Json> pending(n);  // the tool calls of each row's last turn
  for (size_t i = 0; i < n; ++i) {
    AgentRollout& r = out[i];
    r.completion_ids = first.ids[i];
    r.tool_mask.assign(r.completion_ids.size(), 1);
    if (with_logprobs) {
      r.logprobs = first.logprobs[i];
      r.entropies = first.entropies.size() == n ? first.entropies[i] : std::vector<float>(r.completion_ids.size(), 0.0f);
    }
    add_turn(r, "model", r.completion_ids.size());
    r.messages.push_back(chat.parse(r.completion_ids, prompt_ids[i], tools));
    r.failed.push_back(false);
    pending[i] = tool_calls_of(r.messages.back());
  }
  std::vector<size_t> active;
  for (size_t i = 0; i < n; ++i)
    if (!pending[i].is_null()) active.push_back(i);

  for (int64_t iteration = 0;
       !active.empty() && (limits.max_tool_calling_iterations < 0 || iteration < limits.max_tool_calling_iterations);
       ++iteration) {
    // 1. run every call of every active row (in row order, each row's calls in order)
    std::vector<ToolCall> calls;
    std::vector<size_t> first_call(active.size() + 1, 0);
    for (size_t k = 0; k < active.size(); ++k) {
      first_call[k] = calls.size();
      for (const Json& call : pending[active[k]]) {
        const Json& fn = call.contains("function") ? call["function"] : call;
        calls.push_back(ToolCall{active[k], fn["name"].get<std::string>(), fn["arguments"]});
      }
    }
    first_call[active.size()] = calls.size();
    const std::vector<ToolResult> results = workers.run(calls, where);

    // 2. append the results as tool messages (an async tool's after the others, as TRL gathers them),
    //    and the tokens the template writes for them; rows that would run over their budget drop them
    std::vector<size_t> continuing;
    std::vector<std::vector<int64_t>> conversations;
    std::vector<int64_t> budgets;
    for (size_t k = 0; k < active.size(); ++k) {
      const size_t i = active[k];
      AgentRollout& r = out[i];
      const size_t messages_before = r.messages.size();
      Json tool_messages = Json::array();
      for (const bool awaited : {false, true})
        for (size_t c = first_call[k]; c < first_call[k + 1]; ++c) {
          if (results[c].awaited != awaited) continue;
          ++r.tool_calls;
          if (results[c].failed) ++r.tool_failures;
          Json message{{"role", "tool"}, {"name", calls[c].name}, {"content", results[c].content}};
          r.messages.push_back(message);
          r.failed.push_back(results[c].failed);
          tool_messages.push_back(std::move(message));
        }
      const std::vector<int64_t> suffix = chat.suffix_ids(tool_messages);
      std::vector<int64_t> conversation = prompt_ids[i];
      conversation.insert(conversation.end(), r.completion_ids.begin(), r.completion_ids.end());
      conversation.insert(conversation.end(), suffix.begin(), suffix.end());
      const int64_t completion_length = static_cast<int64_t>(conversation.size() - prompt_ids[i].size());
      const bool overlong = completion_length > limits.max_completion_length ||
                            (limits.max_model_len > 0 && static_cast<int64_t>(conversation.size()) >= limits.max_model_len);
      if (overlong) {  // the results never enter the completion; the row ends as it is
        r.messages.erase(r.messages.begin() + static_cast<std::ptrdiff_t>(messages_before), r.messages.end());
        r.failed.resize(messages_before);
        continue;
      }
      r.completion_ids.insert(r.completion_ids.end(), suffix.begin(), suffix.end());
      r.tool_mask.insert(r.tool_mask.end(), suffix.size(), 0);
      if (with_logprobs) {
        r.logprobs.insert(r.logprobs.end(), suffix.size(), 0.0f);
        r.entropies.insert(r.entropies.end(), suffix.size(), 0.0f);
      }
      add_turn(r, "tool", suffix.size());
      continuing.push_back(i);
      conversations.push_back(std::move(conversation));
      budgets.push_back(limits.max_completion_length - completion_length);
    }
    if (continuing.empty()) break;

    // 3. the model continues each conversation, within what is left of its completion budget
    const int64_t most = *std::max_element(budgets.begin(), budgets.end());
    TurnOutput next;
    if (most > 0) {
      next = generate(conversations, continuing, most);
      runtimeCheck(next.ids.size() == continuing.size(), "tool loop: the generator answered ", next.ids.size(),
                   " of ", continuing.size(), " conversations");
    } else {
      next.ids.assign(continuing.size(), {});
    }
    active.clear();
    for (size_t k = 0; k < continuing.size(); ++k) {
      const size_t i = continuing[k];
      AgentRollout& r = out[i];
      std::vector<int64_t> ids = next.ids[k];
      const size_t keep = static_cast<size_t>(std::max<int64_t>(0, budgets[k]));
      if (ids.size() > keep) ids.resize(keep);
      r.completion_ids.insert(r.completion_ids.end(), ids.begin(), ids.end());
      r.tool_mask.insert(r.tool_mask.end(), ids.size(), 1);
      if (with_logprobs) {
        const bool has = next.logprobs.size() == continuing.size();
        for (size_t t = 0; t < ids.size(); ++t) {
          r.logprobs.push_back(has && t < next.logprobs[k].size() ? next.logprobs[k][t] : 0.0f);
          r.entropies.push_back(has && t < next.entropies[k].size() ? next.entropies[k][t] : 0.0f);
        }
      }
      add_turn(r, "model", ids.size());
      if (ids.empty()) continue;  // cut to nothing: no message, no further calls
      r.messages.push_back(chat.parse(ids, conversations[k], tools));
      r.failed.push_back(false);
      pending[i] = tool_calls_of(r.messages.back());
      if (!pending[i].is_null()) active.push_back(i);
    }
  }
  return out;
}

}  // namespace rayless
