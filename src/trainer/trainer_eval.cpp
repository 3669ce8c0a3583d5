// Evaluation during training (eval.path): held-out prompts, each completed eval.num_generations times
// by the current policy (greedy unless eval.greedy = false), scored by the training reward functions.
// Metrics take TRL's names with its eval_ prefix; the completions go to their own store,
// OUTPUT/rollouts/eval/, numbered by the optimizer step they were taken after.
#include <torch/types.h>

#include "rayless/agent/tool_workers.h"
#include "rayless/base/log.h"
#include "rayless/comm/communicator.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/rewards/rewards.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace rayless {

using namespace trainer_detail;

namespace {

// mean and (Bessel) std of the finite values, NaN when there are none
std::pair<double, double> nan_mean_std(const torch::Tensor& values) {
  const torch::Tensor v = values.to(torch::kFloat64).masked_select(torch::isfinite(values.to(torch::kFloat64)));
  if (v.numel() == 0) return {NAN, NAN};
  return {v.mean().item<double>(), v.numel() > 1 ? v.std().item<double>() : 0.0};
}

}  // namespace

bool Trainer::eval_due() const {
  if (eval_dataset_.size() == 0) return false;
  return optimizer_step_ == cfg_.train.max_steps || (cfg_.eval.steps > 0 && optimizer_step_ % cfg_.eval.steps == 0);
}

StepMetrics Trainer::evaluate() {
  const int rank = comm_->rank(), world = comm_->size();
  const int64_t G = cfg_.eval.num_generations;
  // prompt i goes to rank i % world: every rank gets its share, even when the set is small
  Drawn drawn;
  std::vector<PromptRow> rows;
  std::vector<std::string> where;
  for (int64_t i = rank; i < eval_dataset_.size(); i += world)
    for (int64_t g = 0; g < G; ++g) {
      rows.push_back(eval_dataset_.row(i));  // read from the file: rows are not held
      where.push_back(eval_dataset_.where(i));
      drawn.rows.group_index.push_back(static_cast<int64_t>(i));
    }
  reset_environments(rows, where);
  std::vector<std::vector<int64_t>> unique_prompts;
  for (size_t k = 0; k < rows.size(); ++k) {
    add_prompt(drawn, rows[k], where[k]);
    if (k % static_cast<size_t>(G) == 0) unique_prompts.push_back(drawn.rows.prompt_ids.back());
  }
  // an environment may tell each rollout something else: then every row is its own prompt
  const bool per_row = tool_workers_ && tool_workers_->has_environment();
  torch::Tensor rewards_per_func = torch::zeros({0, static_cast<int64_t>(rewards_->size())}, torch::kFloat32);
  if (!unique_prompts.empty()) {
    SamplingParams params = sampling_params_from_config(cfg_.generation, *tokenizer_);
    params.num_generations = per_row ? 1 : G;
    params.greedy = params.greedy || cfg_.eval.greedy;
    params.ranks_on_node = runtime_.local_size();
    // a row's global index: its prompt's place in the eval set, then its generation
    SamplingStream stream = sampling_stream(cfg_.train.seed, optimizer_step_, "eval");
    for (int64_t i = rank; i < eval_dataset_.size(); i += world)
      for (int64_t g = 0; g < G; ++g) stream.rows.push_back(i * G + g);
    policy_->eval();
    const auto kept = tool_chat_ && cfg_.agent.keep_kv_cache ? std::make_shared<KeptKV>() : nullptr;
    {
      ops::AutocastScope autocast(cfg_.train.bf16, device_);
      drawn.sampled = generate(policy_, per_row ? drawn.rows.prompt_ids : unique_prompts, params, stream, tokenizer_.get(),
                               kept.get());
    }
    if (tool_chat_) roll_out_tools(drawn, turn_output(drawn.sampled), sampler_turns(params, stream, kept), where, kept.get());
    policy_->train();
    take_sampled(drawn, optimizer_step_);
    drawn.rows.advantages = torch::zeros({drawn.rows.size()}, torch::kFloat32);
    rewards_per_func = score(drawn);
  }

  // every rank's rewards and lengths, then TRL's metrics under eval_
  const torch::Tensor all = torch::cat(comm_->allgather_variable(rewards_per_func), 0);
  const torch::Tensor lengths =
      torch::cat(comm_->allgather_variable(unique_prompts.empty() ? torch::zeros({0}, torch::kFloat32)
                                                                  : drawn.rows.model_lengths().to(torch::kFloat32)),
                 0);
  const torch::Tensor clipped =
      torch::cat(comm_->allgather_variable(unique_prompts.empty() ? torch::zeros({0}, torch::kFloat32)
                                                                  : drawn.rows.truncated.to(torch::kFloat32)),
                 0);
  const torch::Tensor weights = torch::tensor(rewards_->weights(), torch::kFloat32);
  const torch::Tensor rewards = (all * weights.unsqueeze(0)).nansum(1);
  StepMetrics m;
  std::tie(m["eval_reward"], m["eval_reward_std"]) = nan_mean_std(rewards);
  for (size_t k = 0; k < rewards_->size(); ++k)
    std::tie(m["eval_rewards/" + rewards_->names()[k] + "/mean"], m["eval_rewards/" + rewards_->names()[k] + "/std"]) =
        nan_mean_std(all.select(1, static_cast<int64_t>(k)));
  m["eval_completions/mean_length"] = lengths.numel() ? lengths.mean().item<double>() : NAN;
  m["eval_completions/min_length"] = lengths.numel() ? lengths.min().item<double>() : NAN;
  m["eval_completions/max_length"] = lengths.numel() ? lengths.max().item<double>() : NAN;
  m["eval_completions/clipped_ratio"] = clipped.numel() ? clipped.mean().item<double>() : NAN;
  m["eval_num_completions"] = static_cast<double>(all.size(0));
  if (rank == 0)
    log_info(str("eval at step ", optimizer_step_, ": reward ", m["eval_reward"], " +- ", m["eval_reward_std"], " over ",
                 all.size(0), " completions of ", eval_dataset_.size(), " prompts"));

  if (!unique_prompts.empty()) {
    RolloutExtras extras{rewards_per_func, (rewards_per_func * weights.unsqueeze(0)).nansum(1), drawn.sampled.entropies,
                         drawn.sampled.logprobs.defined() ? drawn.sampled.logprobs.to(logp_dtype_) : torch::Tensor(), {}};
    for (const AgentRollout& r : drawn.rollouts)
      extras.conversations.push_back(r.record().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    RolloutAttrs attrs = store_attrs(G);
    attrs.strings["split"] = "eval";
    write_rollouts((output_dir_ / "rollouts" / "eval").string(), pack_rollouts(drawn.rows, rank, extras), attrs);
  }
  return m;
}

}  // namespace rayless
