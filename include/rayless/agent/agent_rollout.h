// The multi-turn rollout of TRL 1.16's GRPOTrainer._tool_call_loop: every completion is read back
// (ToolChat::parse); the rows whose last turn called tools run them (ToolWorkers), their results are
// appended as the chat template's tool-result tokens, and generation continues for those rows from
// the whole conversation so far (re-prefilled: TRL re-generates from prompt + completion + results),
// for up to agent.max_tool_calling_iterations rounds. A row's completion is everything after its
// prompt; its tool mask is 1 on what the model wrote and 0 on what the tools wrote, so the loss and
// the importance ratio see only the model's tokens (loss mask = completion mask x tool mask).
//
// Budgets as TRL keeps them: results that would push a completion past max_completion_length (or
// the whole sequence to the model's max_position_embeddings) are dropped and the row stops as it
// is; a continuation is cut to what is left of max_completion_length.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rayless {

class ToolChat;
class ToolWorkers;

// One turn of generation for some rows: ids[k] continues prompts[k] (cut after its first EOS).
struct TurnOutput {
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> logprobs, entropies;  // per token, when the generator gives them
};

// prompts[k] is the conversation so far of batch row rows[k]; at most max_new_tokens each.
using GenerateTurn = std::function<TurnOutput(const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<size_t>& rows, int64_t max_new_tokens)>;

struct AgentLimits {
  int64_t max_completion_length = 0;
  int64_t max_tool_calling_iterations = -1;  // -1 = no limit
  int64_t max_model_len = 0;                 // the model's max_position_embeddings (0 = none)
};

struct AgentRollout {
  std::vector<int64_t> completion_ids;     // everything after the prompt: model turns and tool results
  std::vector<uint8_t> tool_mask;          // 1 = written by the model, 0 = by a tool or the environment
  std::vector<float> logprobs, entropies;  // the generator's, 0 on tool tokens (empty when it gave none)
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // TRL's completion: assistant turns, tool results
  std::vector<bool> failed;                // per message: a tool result that is an error
  nlohmann::ordered_json turns = nlohmann::ordered_json::array();  // [{"by": "model"|"tool", "start", "end"}]
  int64_t tool_calls = 0;                  // calls run (TRL's tools/call_frequency counts these)
  int64_t tool_failures = 0;               // of which raised or named no tool

  // What the store keeps of the conversation: {"messages": [... with "failed": true on failed tool
  // results], "turns": [...], "tool_calls": n, "tool_failures": m} (docs/rollout-format.md).
  nlohmann::ordered_json record() const;
};

// `first` is the first turn of every row (as sampled or replayed); `tools` are the schemas the
// prompts advertised; `where(i)` names row i in errors.
std::vector<AgentRollout> run_tool_loop(const ToolChat& chat, ToolWorkers& workers, const nlohmann::ordered_json& tools,
                                        const std::vector<std::vector<int64_t>>& prompt_ids, TurnOutput first,
                                        const GenerateTurn& generate, const AgentLimits& limits,
                                        const std::function<std::string(size_t row)>& where);

}  // namespace rayless
