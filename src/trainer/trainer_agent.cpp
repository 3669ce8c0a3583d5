// Tools and environments in the trainer, as TRL 1.16's GRPOTrainer runs them: the workers start with
// the run, the tools are advertised through the chat template's `tools` variable, environments are
// reset before their rows' prompts are built, and after each row's first turn the tool loop
// (agent/agent_rollout.h) continues the rows that call tools. Generation stays the sampler's public
// generate(): a continuation re-prefills the conversation so far (docs/tools.md, "Generation engine").
#include <torch/types.h>

#include <algorithm>

#include "rayless/agent/environment_reward.h"
#include "rayless/agent/tool_chat.h"
#include "rayless/agent/tool_workers.h"
#include "rayless/base/log.h"
#include "rayless/comm/communicator.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/rewards/rewards.h"
#include "rayless/runtime/available_memory.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/step_metrics.h"
#include "rayless/trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace rayless {

using namespace trainer_detail;
using Json = nlohmann::ordered_json;

TurnOutput trainer_detail::turn_output(const GenerationOutput& out) {
  TurnOutput turn;
  const torch::Tensor ids = out.completion_ids.to(torch::kCPU).contiguous();
  const torch::Tensor lengths = out.completion_mask.sum(1).to(torch::kCPU);
  const bool with_logprobs = out.logprobs.defined();
  const torch::Tensor logprobs = with_logprobs ? out.logprobs.to(torch::kCPU, torch::kFloat32).contiguous() : torch::Tensor();
  const torch::Tensor entropies = with_logprobs ? out.entropies.to(torch::kCPU, torch::kFloat32).contiguous() : torch::Tensor();
  for (int64_t i = 0; i < ids.size(0); ++i) {
    const int64_t n = lengths[i].item<int64_t>();
    const int64_t* row = ids[i].data_ptr<int64_t>();
    turn.ids.emplace_back(row, row + n);
    if (with_logprobs) {
      const float* lp = logprobs[i].data_ptr<float>();
      const float* en = entropies[i].data_ptr<float>();
      turn.logprobs.emplace_back(lp, lp + n);
      turn.entropies.emplace_back(en, en + n);
    }
  }
  return turn;
}

void Trainer::start_agent() {
  if (!cfg_.agentic()) return;
  tool_workers_ = std::make_unique<ToolWorkers>(cfg_, runtime_.rank());
  tool_chat_ = std::make_unique<ToolChat>(prompt_format_, tokenizer_, cfg_.agent.tool_call_format);
  // TRL: apply_chat_template(..., tools=self.tools or None)
  if (!tool_workers_->schemas().empty()) prompt_format_.kwargs["tools"] = tool_workers_->schemas();
  if (tool_workers_->environment_has_reward()) rewards_->add(std::make_unique<EnvironmentReward>(*tool_workers_), 1.0);
}

void Trainer::reset_environments(std::vector<PromptRow>& rows, const std::vector<std::string>& where) {
  if (!tool_workers_ || !tool_workers_->has_environment()) return;
  std::vector<nlohmann::json> fields;
  for (const PromptRow& row : rows) fields.push_back(row.fields);
  const std::vector<Json> observations = tool_workers_->reset(fields, [&](size_t i) { return where[i]; });
  for (size_t i = 0; i < rows.size(); ++i) {
    Json observation = observations[i];
    if (observation.is_null()) continue;
    PromptRow& row = rows[i];
    inputCheck(row.is_chat(), where[i], ": an environment's observation joins the prompt's last message, and this "
               "row's prompt is plain text: give it as messages");
    Json& last = row.messages.back();
    Json content = last.contains("content") ? last["content"] : Json("");
    if (observation.is_array() && content.is_string())
      content = Json::array({Json{{"type", "text"}, {"text", content}}});
    if (observation.is_string() && content.is_array())
      observation = Json::array({Json{{"type", "text"}, {"text", observation}}});
    inputCheck(observation.is_string() == content.is_string(), where[i], ": the environment's observation (",
               observation.type_name(), ") cannot join the last message's content (", content.type_name(), ")");
    if (content.is_string()) {
      last["content"] = content.get<std::string>() + observation.get<std::string>();
    } else {
      for (const Json& part : observation) content.push_back(part);
      last["content"] = content;
    }
  }
}

GenerateTurn Trainer::sampler_turns(const SamplingParams& params, const SamplingStream& stream,
                                    std::shared_ptr<KeptKV> kept) {
  // each later turn draws from a stream of its own, each row still by its global index
  return [this, params, stream, kept, turn = int64_t{0}](const std::vector<std::vector<int64_t>>& prompts,
                                                         const std::vector<size_t>& rows, int64_t max_new_tokens) mutable {
    SamplingParams p = params;
    p.num_generations = 1;  // each row continues its own conversation
    p.max_new_tokens = max_new_tokens;
    ops::AutocastScope autocast(cfg_.train.bf16, device_);
    return turn_output(generate(policy_, prompts, p, continuation_stream(stream, ++turn, rows), tokenizer_.get(), kept.get()));
  };
}

GenerateTurn Trainer::replayed_turns(const std::vector<std::vector<std::vector<int64_t>>>& turns, std::vector<size_t>& next,
                                     const std::string& where) {
  return [&turns, &next, where](const std::vector<std::vector<int64_t>>& prompts, const std::vector<size_t>& rows,
                                int64_t max_new_tokens) {
    TurnOutput out;
    for (size_t row : rows) {
      inputCheck(next[row] < turns[row].size(), where, ": row ", row, ": the tool loop continues it after turn ",
                 next[row], " but completion_turns holds ", turns[row].size(), " turns");
      std::vector<int64_t> ids = turns[row][next[row]++];
      if (static_cast<int64_t>(ids.size()) > max_new_tokens) ids.resize(static_cast<size_t>(max_new_tokens));
      out.ids.push_back(std::move(ids));
    }
    return out;
  };
}

void Trainer::roll_out_tools(Drawn& drawn, TurnOutput first, const GenerateTurn& generate,
                             const std::vector<std::string>& where, const KeptKV* kept) {
  AgentLimits limits;
  limits.max_completion_length = cfg_.generation.max_completion_length;
  limits.max_tool_calling_iterations = cfg_.agent.max_tool_calling_iterations;
  limits.max_model_len = policy_->config().max_position_embeddings;
  drawn.rollouts = run_tool_loop(*tool_chat_, *tool_workers_, tool_workers_->schemas(), drawn.rows.prompt_ids,
                                 std::move(first), generate, limits, [&](size_t i) { return where[i]; });
  if (kept && kept->resumed_rows > 0) {
    static bool said = false;  // once per process: that the kept keys and values are in use, and what they saved
    if (!said)
      log_info(str("tools: later turns resume on kept keys and values (agent.keep_kv_cache): ", kept->resumed_rows,
                   " rows of this generation skipped ", kept->reused_tokens, " prompt tokens",
                   kept->dropped_rows > 0 ? str("; ", kept->dropped_rows, " rows prefilled again, over the store's budget of ",
                                                bytes_text(static_cast<double>(kept->budget_bytes)), " (the slots' cache)")
                                          : std::string()));
    said = true;
  }

  // the completions as the sampler would have given them: right-padded, ended by EOS or truncated
  const SamplingParams params = sampling_params_from_config(cfg_.generation, *tokenizer_);
  const int64_t n = static_cast<int64_t>(drawn.rollouts.size());
  int64_t width = 0;
  bool with_logprobs = n > 0;
  for (const AgentRollout& r : drawn.rollouts) {
    width = std::max<int64_t>(width, static_cast<int64_t>(r.completion_ids.size()));
    with_logprobs = with_logprobs && r.logprobs.size() == r.completion_ids.size();
  }
  GenerationOutput& s = drawn.sampled;
  s.completion_ids = torch::full({n, width}, params.pad_id, torch::kInt64);
  s.completion_mask = torch::zeros({n, width}, torch::kInt64);
  s.truncated = torch::zeros({n}, torch::kBool);
  torch::Tensor tool_mask = torch::ones({n, width}, torch::kFloat32);  // TRL pads it with 1
  s.logprobs = with_logprobs ? torch::zeros({n, width}, torch::kFloat32) : torch::Tensor();
  s.entropies = with_logprobs ? torch::zeros({n, width}, torch::kFloat32) : torch::Tensor();
  for (int64_t i = 0; i < n; ++i) {
    const AgentRollout& r = drawn.rollouts[static_cast<size_t>(i)];
    const int64_t length = static_cast<int64_t>(r.completion_ids.size());
    if (length > 0) {
      s.completion_ids[i].slice(0, 0, length).copy_(torch::tensor(r.completion_ids, torch::kInt64));
      s.completion_mask[i].slice(0, 0, length).fill_(1);
      std::vector<float> mask(r.tool_mask.begin(), r.tool_mask.end());
      tool_mask[i].slice(0, 0, length).copy_(torch::tensor(mask, torch::kFloat32));
      if (with_logprobs) {
        s.logprobs[i].slice(0, 0, length).copy_(torch::tensor(r.logprobs, torch::kFloat32));
        s.entropies[i].slice(0, 0, length).copy_(torch::tensor(r.entropies, torch::kFloat32));
      }
    }
    const int64_t last = length > 0 ? r.completion_ids.back() : -1;
    const bool ended = last == params.pad_id ||
                       std::find(params.eos_ids.begin(), params.eos_ids.end(), last) != params.eos_ids.end();
    s.truncated[i] = !ended;
  }
  drawn.rows.tool_mask = tool_mask;
}

// TRL's tools/call_frequency (calls per completion, all ranks) and tools/failure_frequency (failed
// calls per call, 0 without calls).
StepMetrics Trainer::tool_metrics(const Drawn& drawn) const {
  StepMetrics m;
  if (!tool_workers_ || tool_workers_->schemas().empty()) return m;
  double calls = 0, failures = 0;
  for (const AgentRollout& r : drawn.rollouts) calls += static_cast<double>(r.tool_calls), failures += static_cast<double>(r.tool_failures);
  torch::Tensor totals = torch::tensor({calls, failures, static_cast<double>(drawn.rollouts.size())}, torch::kFloat64);
  comm_->allreduce(totals, ReduceOp::Sum);
  const double all_calls = totals[0].item<double>(), all_failures = totals[1].item<double>(), rows = totals[2].item<double>();
  // TRL divides integer tensors: a float32 result
  m["tools/call_frequency"] = static_cast<float>(rows > 0 ? all_calls / rows : 0.0);
  m["tools/failure_frequency"] = static_cast<float>(all_calls > 0 ? all_failures / all_calls : 0.0);
  return m;
}

}  // namespace rayless
