// A generation, as the trainer's table of contents: draw prompts and completions (sampled, or
// replayed from a file), score them, advantages over the whole batch, old/reference log-probs, the
// store. Each step is one call into the module that owns it.
#include <torch/types.h>

#include <optional>

#include "rayless/agent/tool_chat.h"
#include "rayless/agent/tool_workers.h"
#include "rayless/base/failure_message.h"
#include "rayless/model/lora.h"
#include "rayless/base/log.h"
#include "rayless/comm/communicator.h"
#include "rayless/grpo/advantages.h"
#include "rayless/grpo/completion_logprobs.h"
#include "rayless/grpo/importance_sampling.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/prompts/prompt_builder.h"
#include "rayless/rewards/rewards.h"
#include "rayless/rollout/replay.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/resource_bounds.h"
#include "rayless/trainer/step_metrics.h"
#include "rayless/trainer/trainer.h"
#include "trainer/trainer_internal.h"

namespace rayless {

using namespace trainer_detail;


Trainer::Generation Trainer::generate_and_score(int64_t generation_step) {
  Drawn drawn = replay_ ? draw_replayed(generation_step) : draw_sampled(generation_step, own_rows());
  const torch::Tensor rewards_per_func = score(drawn);
  return finish_generation(std::move(drawn), rewards_per_func);
}

Trainer::Generation Trainer::finish_generation(Drawn drawn, const torch::Tensor& rewards_per_func) {
  const int64_t generation_step = drawn.rows.generation_step;
  // rewards of every function, then advantages over the whole global batch: TRL gathers the table
  // (in float32), so a group may span ranks and every rank holds the same advantages
  Generation generation;
  RolloutBatch& rows = generation.rows;
  rows = std::move(drawn.rows);
  if (rows.policy_version < 0) rows.policy_version = optimizer_step_;  // sampled here, by the current policy
  if (cfg_.grpo.mask_truncated_completions)
    rows.completion_mask = rows.completion_mask * (~rows.truncated).unsqueeze(1).to(torch::kFloat32);
  if (drawn.sampled_elsewhere) rows.sampling_logps = drawn.sampled.logprobs.to(logp_dtype_);
  generation.order = micro_batch_order(generation_step, rows.size());

  const torch::Tensor all_rewards_per_func = torch::cat(comm_->allgather_variable(rewards_per_func), 0);
  AdvantageSettings settings{cfg_.grpo.num_generations, cfg_.grpo.scale_rewards, cfg_.grpo.multi_objective_aggregation};
  const AdvantageOutput all = compute_advantages(all_rewards_per_func, rewards_->weights(), settings);
  const int64_t first_row = comm_->rank() * rows.size();  // every rank holds the same number of rows
  rows.advantages = all.advantages.slice(0, first_row, first_row + rows.size());

  // for the non-finite guard: rows whose logits (the sampler's) or rewards were not finite
  generation.rewards_per_func = rewards_per_func;
  const torch::Tensor reward_inf = torch::isinf(rewards_per_func).any(1);
  const torch::Tensor logits_bad = drawn.sampled.nonfinite.defined() ? drawn.sampled.nonfinite.to(torch::kCPU, torch::kBool)
                                                                     : torch::zeros_like(reward_inf);
  generation.nonfinite_rows = reward_inf | logits_bad;
  generation.logits_nonfinite = logits_bad.any().item<bool>();
  generation.rewards_nonfinite = reward_inf.any().item<bool>();
  if (generation.logits_nonfinite)
    log_warn(str("generation ", generation_step, ": the logits of ", logits_bad.sum().item<int64_t>(), " of ", rows.size(),
                 " rows held a NaN or an infinity (the policy diverged); they ended early, and the steps trained on this "
                 "generation will not be applied (first: ", prompt_name(rows.group_index[static_cast<size_t>(logits_bad.nonzero()[0][0].item<int64_t>())]), ")"));

  torch::Tensor entropies = drawn.sampled.entropies;  // the sampler's, unless the old-log-prob pass runs
  {
    const MemoryPhase phase(str("the old and reference log-prob passes of generation ", generation_step),
                            memory_bounds(cfg_, policy_->config(), runtime_.size(), MemoryUse::LogprobPass));
    old_and_reference_logps(rows, entropies);
  }
  rows.num_items_in_batch = global_sum(*comm_, static_cast<int64_t>(rows.loss_mask().sum().item<double>()));
  generation.metrics = generation_metrics(*comm_, rows, all_rewards_per_func, all, rewards_->names(), num_tokens_);
  if (corrects_sampling_) {
    // TRL's correction of another engine's samples: old over sampling log-probs, per token or sequence
    const ImportanceSampling is = importance_sampling_ratio(rows.old_logps, rows.sampling_logps, rows.loss_mask(),
                                                            importance_sampling_settings_from_config(cfg_));
    rows.importance_sampling_ratio = is.ratio;
    for (const auto& [name, value] : importance_sampling_metrics(*comm_, is)) generation.metrics[name] = value;
  }
  for (const auto& [name, value] : tool_metrics(drawn)) generation.metrics[name] = value;
  keep_samples(drawn, rewards_per_func, rows.advantages);

  // the store: what this rank generated, for μ > 1 reuse, resume and inspection
  RolloutExtras extras{rewards_per_func, all.rewards.slice(0, first_row, first_row + rows.size()), entropies,
                       drawn.sampled.logprobs.defined() ? drawn.sampled.logprobs.to(logp_dtype_) : torch::Tensor(), {}};
  for (const AgentRollout& r : drawn.rollouts) extras.conversations.push_back(r.record().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  RolloutAttrs attrs = store_attrs(cfg_.grpo.num_generations);
  attrs.numbers["old_logps_are_sampling_logps"] = rows.old_logps.defined() ? 0.0 : 1.0;
  attrs.numbers["num_items_in_batch"] = static_cast<double>(rows.num_items_in_batch);
  attrs.numbers["temperature"] = cfg_.generation.temperature;
  attrs.numbers["completion_width"] = static_cast<double>(rows.completion_ids.size(1));
  attrs.numbers["beta"] = cfg_.grpo.beta;
  write_rollouts((output_dir_ / "rollouts").string(), pack_rollouts(rows, comm_->rank(), extras), attrs);
  return generation;
}

RowPiece Trainer::own_rows() const {
  const int64_t n = cfg_.train.per_device_train_batch_size * steps_per_generation_;
  return {comm_->rank(), comm_->rank() * n, (comm_->rank() + 1) * n};
}

// Prompts of global rows [first, last) of a generation, as TRL's RepeatSampler and accelerate lay the
// generation batch out: the global batch of prompts (each repeated num_generations times,
// consecutively) cut into equal per-rank slices of per_device_train_batch_size x steps_per_generation
// completions. Groups are whole on a rank when that count is a multiple of num_generations, else they
// may span ranks. A training rank draws its own slice; a generation rank the rows it samples.
Trainer::Drawn Trainer::draw_prompts(int64_t generation_step, const RowPiece& piece) {
  const int64_t G = cfg_.grpo.num_generations;
  const PromptShard shard = shard_prompts(shard_spec_, 0, data_cursor(generation_step));
  Drawn drawn;
  std::vector<PromptRow> rows;
  for (int64_t i = piece.first; i < piece.last; ++i) {
    const int64_t dataset_row = shard.rows[static_cast<size_t>(i / G)];
    rows.push_back(dataset_.row(dataset_row));  // read from the file: rows are not held
    drawn.where.push_back(dataset_.where(dataset_row));
    drawn.rows.group_index.push_back(dataset_row);
  }
  reset_environments(rows, drawn.where);  // each rollout's environment first: its observation is part of the prompt
  for (size_t k = 0; k < rows.size(); ++k) add_prompt(drawn, rows[k], drawn.where[k]);
  drawn.rows.generation_step = generation_step;
  return drawn;
}

// The rows of `piece` sampled: a training rank's whole slice with that rank's stream, exactly as the
// rank samples it in a synchronous run (so generation ranks reproduce it); a part of a slice (more
// generation ranks than training ranks) with a stream of its own.
Trainer::Drawn Trainer::draw_sampled(int64_t generation_step, const RowPiece& piece) {
  const int64_t G = cfg_.grpo.num_generations;
  Drawn drawn = draw_prompts(generation_step, piece);
  std::vector<std::vector<int64_t>> unique_prompts;  // one per group present in the piece
  for (int64_t i = piece.first; i < piece.last; ++i)
    if (i % G == 0) unique_prompts.push_back(drawn.rows.prompt_ids[static_cast<size_t>(i - piece.first)]);

  // one batched, KV-cached pass: G samples per prompt when the groups are whole here (and the prompts
  // are the dataset's: environments may tell each rollout something else), else one per row
  const bool whole_groups = piece.first % G == 0 && piece.size() % G == 0 && !(tool_workers_ && tool_workers_->has_environment());
  SamplingParams params = sampling_params_from_config(cfg_.generation, *tokenizer_);
  params.num_generations = whole_groups ? G : 1;
  params.return_logprobs = !needs_old_logps_ || plan_;  // generation ranks always send theirs
  params.ranks_on_node = runtime_.local_size();
  // row i of this piece is row piece.first + i of the global batch: its tokens depend on that index,
  // not on the rank (training or generation) or the batch that runs it
  const SamplingStream stream = sampling_stream(cfg_.train.seed, generation_step, "sample", piece.first);
  policy_->eval();
  const auto start = Clock::now();
  // tools: the rows that end a turn keep their keys and values for the next (agent.keep_kv_cache)
  const auto kept = tool_chat_ && cfg_.agent.keep_kv_cache ? std::make_shared<KeptKV>() : nullptr;
  {
    ops::AutocastScope autocast(cfg_.train.bf16, device_);  // TRL generates under its autocast too
    drawn.sampled = generate(policy_, whole_groups ? unique_prompts : drawn.rows.prompt_ids, params, stream, tokenizer_.get(),
                             kept.get());
  }
  // tools: the rows that called one continue, each from its own conversation
  if (tool_chat_) roll_out_tools(drawn, turn_output(drawn.sampled), sampler_turns(params, stream, kept), drawn.where, kept.get());
  sampling_seconds_ += seconds_since(start);
  policy_->train();
  take_sampled(drawn, generation_step);
  return drawn;
}

// The sampler's output as the batch's completion tensors, on the host.
void Trainer::take_sampled(Drawn& drawn, int64_t step) {
  RolloutBatch& rows = drawn.rows;
  rows.generation_step = step;
  rows.completion_ids = drawn.sampled.completion_ids.to(torch::kCPU);
  rows.truncated = drawn.sampled.truncated.to(torch::kCPU).to(torch::kBool);
  rows.raw_lengths = drawn.sampled.completion_mask.sum(1).to(torch::kInt64).cpu();
  rows.completion_mask = drawn.sampled.completion_mask.to(torch::kFloat32).cpu();
}

// What every stored step carries about the run (provenance, reward names, world size).
RolloutAttrs Trainer::store_attrs(int64_t num_generations) const {
  RolloutAttrs attrs;
  attrs.world_size = comm_->size();
  attrs.num_generations = num_generations;
  attrs.reward_names = rewards_->names();
  attrs.reward_weights = rewards_->weights();
  attrs.config_hash = config_hash_;
  attrs.tokenizer_hash = tokenizer_->hash();
  attrs.tokenizer = cfg_.tokenizer.path.empty() ? (std::filesystem::path(cfg_.model.path) / "tokenizer.json").string()
                                                : cfg_.tokenizer.path;
  return attrs;
}

// A replayed generation (train.replay_rollouts): prompts built by rayless from the dataset rows and
// checked against the file's tokens, completions as the file has them.
Trainer::Drawn Trainer::draw_replayed(int64_t generation_step) {
  const ReplayedGeneration& g = replay_->at(generation_step, comm_->rank());
  const int64_t N = static_cast<int64_t>(g.rows.size());
  inputCheck(N == cfg_.train.per_device_train_batch_size * steps_per_generation_, g.where, ": ", N,
             " rows, but one generation of this config has per_device_train_batch_size x steps_per_generation = ",
             cfg_.train.per_device_train_batch_size * steps_per_generation_, " per rank");
  Drawn drawn;
  std::vector<PromptRow> rows(static_cast<size_t>(N));
  std::vector<std::string> where;
  for (int64_t i = 0; i < N; ++i) {
    PromptRow& row = rows[static_cast<size_t>(i)];
    row.fields = g.rows[static_cast<size_t>(i)];
    const std::string problem = parse_prompt_row(row.fields, cfg_.data.prompt_field, cfg_.data.messages_field, row);
    inputCheck(problem.empty(), g.where, ": row ", i, ": ", problem);
    where.push_back(str(g.where, " row ", i));
    drawn.rows.group_index.push_back((comm_->rank() * N + i) / cfg_.grpo.num_generations);
  }
  reset_environments(rows, where);
  for (int64_t i = 0; i < N; ++i) {
    add_prompt(drawn, rows[static_cast<size_t>(i)], where[static_cast<size_t>(i)]);
    if (!g.prompt_ids.empty())
      inputCheck(drawn.rows.prompt_ids.back() == g.prompt_ids[static_cast<size_t>(i)], g.where, ": row ", i,
                 ": the file's prompt_ids differ from rayless's tokens of the prompt (",
                 g.prompt_ids[static_cast<size_t>(i)].size(), " tokens vs ", drawn.rows.prompt_ids.back().size(),
                 "): check the tokenizer and chat template");
  }
  if (!g.completion_turns.empty()) return draw_replayed_turns(std::move(drawn), g, generation_step, where);
  inputCheck(!tool_chat_ || !g.tool_mask.empty(), g.where, ": a run with tools replays \"completion_turns\" (the "
             "model's turns; rayless runs the tools between them) or \"completion_ids\" with their \"tool_mask\"");
  // right-padded; a completion ended when its last token is EOS or padding, else it is truncated (TRL)
  int64_t width = 0;
  for (const auto& c : g.completion_ids) width = std::max<int64_t>(width, static_cast<int64_t>(c.size()));
  const SamplingParams params = sampling_params_from_config(cfg_.generation, *tokenizer_);
  RolloutBatch& batch = drawn.rows;
  batch.generation_step = generation_step;
  batch.completion_ids = torch::full({N, width}, params.pad_id, torch::kInt64);
  batch.completion_mask = torch::zeros({N, width}, torch::kFloat32);
  batch.truncated = torch::zeros({N}, torch::kBool);
  batch.raw_lengths = torch::zeros({N}, torch::kInt64);
  if (!g.tool_mask.empty()) batch.tool_mask = torch::ones({N, width}, torch::kFloat32);  // TRL pads it with 1
  for (int64_t i = 0; i < N; ++i) {
    const auto& c = g.completion_ids[static_cast<size_t>(i)];
    const int64_t length = static_cast<int64_t>(c.size());
    batch.completion_ids[i].slice(0, 0, length).copy_(torch::tensor(c, torch::kInt64));
    batch.completion_mask[i].slice(0, 0, length).fill_(1);
    batch.raw_lengths[i] = length;
    if (!g.tool_mask.empty())
      batch.tool_mask[i].slice(0, 0, length).copy_(torch::tensor(g.tool_mask[static_cast<size_t>(i)], torch::kInt64));
    const bool ended = c.back() == params.pad_id ||
                       std::find(params.eos_ids.begin(), params.eos_ids.end(), c.back()) != params.eos_ids.end();
    batch.truncated[i] = !ended;
  }
  if (!g.logprobs.empty()) {
    // the file's sampler log-probs: these completions count as sampled by another engine
    drawn.sampled.logprobs = torch::zeros({N, width}, torch::kFloat64);
    for (int64_t i = 0; i < N; ++i) {
      const auto& lp = g.logprobs[static_cast<size_t>(i)];
      drawn.sampled.logprobs[i].slice(0, 0, static_cast<int64_t>(lp.size())).copy_(torch::tensor(lp, torch::kFloat64));
    }
    drawn.sampled_elsewhere = true;
  }
  return drawn;
}

// A replayed tool-calling generation: the file gives the model's turns, rayless runs the tools between
// them and masks their tokens. When the file also has completion_ids (TRL's), they must come out the same.
Trainer::Drawn Trainer::draw_replayed_turns(Drawn drawn, const ReplayedGeneration& g, int64_t generation_step,
                                            const std::vector<std::string>& where) {
  inputCheck(tool_chat_ != nullptr, g.where, ": \"completion_turns\" replays a tool-calling run, and this config has "
             "no [tools.NAME] and no [environment]");
  TurnOutput first;
  for (const auto& turns : g.completion_turns) first.ids.push_back(turns.front());
  std::vector<size_t> next(g.completion_turns.size(), 1);
  roll_out_tools(drawn, std::move(first), replayed_turns(g.completion_turns, next, g.where), where);
  for (size_t i = 0; i < next.size(); ++i)
    inputCheck(next[i] == g.completion_turns[i].size(), g.where, ": row ", i, ": completion_turns holds ",
               g.completion_turns[i].size(), " turns but the tool loop used ", next[i],
               " (a tool call that did not parse, agent.max_tool_calling_iterations or the completion budget ended it)");
  if (!g.completion_ids.empty())
    for (size_t i = 0; i < next.size(); ++i) {
      const auto& made = drawn.rollouts[i].completion_ids;
      const auto& want = g.completion_ids[i];
      const auto diff = std::mismatch(made.begin(), made.end(), want.begin(), want.end());
      inputCheck(made == want, g.where, ": row ", i, ": the tool loop assembled ", made.size(),
                 " completion tokens that differ from the file's ", want.size(), " completion_ids from token ",
                 diff.first - made.begin(), " on (tool results, chat template or tokenizer differ)");
    }
  take_sampled(drawn, generation_step);
  return drawn;
}

void Trainer::add_prompt(Drawn& drawn, const PromptRow& row, const std::string& where) {
  PromptTokens prompt =
      build_prompt(row, prompt_format_, *tokenizer_, cfg_.data.max_prompt_length, cfg_.data.truncation, where);
  drawn.rows.prompt_ids.push_back(std::move(prompt.ids));
  drawn.prompt_texts.push_back(std::move(prompt.text));
  drawn.fields.push_back(row.fields);
}

// [N, K] rewards of this rank's completions, in float32 as TRL holds them. Keeps the decoded texts.
torch::Tensor Trainer::score(Drawn& drawn) {
  const RolloutBatch& rows = drawn.rows;
  std::vector<std::string> texts;
  std::vector<int64_t> counts;
  for (int64_t i = 0; i < rows.size(); ++i) {
    const int64_t length = rows.raw_lengths[i].item<int64_t>();
    auto ids = rows.completion_ids[i].slice(0, 0, length).contiguous();
    texts.push_back(tokenizer_->decode(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length),
                                       /*skip_special_tokens=*/true));
    counts.push_back(length);
  }
  // tool-calling runs: reward workers also see the completion as TRL's reward functions do, as messages
  std::vector<nlohmann::json> fields = drawn.fields;
  for (size_t i = 0; i < drawn.rollouts.size() && i < fields.size(); ++i)
    if (fields[i].is_object()) fields[i]["completion_messages"] = nlohmann::json::parse(drawn.rollouts[i].messages.dump());
  std::vector<RewardSet::NonfiniteScore> infinite;
  const torch::Tensor scores = rewards_->score(drawn.prompt_texts, texts, counts, fields, &infinite);
  torch::Tensor out = scores.to(torch::kFloat32);  // TRL holds rewards in float32: past 3.4e38 they are infinite
  drawn.completion_texts = std::move(texts);
  // every reward that is not a finite number, named with its row (rewards stay as TRL would have them:
  // an infinity the function returned counts as no score, NaN; a finite one too large for float32 is
  // an infinity, which the guard then sees)
  const auto name_of = [&](int64_t i, size_t k, const std::string& value, const std::string& becomes) {
    return str("reward ", rewards_->names()[k], " of completion ", i, " (", prompt_name(rows.group_index[static_cast<size_t>(i)]),
               ") is ", value, ": ", becomes);
  };
  std::vector<std::string> warnings;
  for (const auto& f : infinite) warnings.push_back(name_of(f.row, f.function, str(f.value), "counted as no score (NaN)"));
  const torch::Tensor overflow = torch::isinf(out).nonzero();
  for (int64_t j = 0; j < overflow.size(0); ++j) {
    const int64_t i = overflow[j][0].item<int64_t>(), k = overflow[j][1].item<int64_t>();
    warnings.push_back(name_of(i, static_cast<size_t>(k), str(scores[i][k].item<double>()),
                               "infinite in float32, as TRL holds rewards; the steps trained on this generation will not be applied"));
  }
  if (!warnings.empty())
    log_warn(str(warnings.front(), warnings.size() > 1 ? str(" (and ", warnings.size() - 1, " more on rank ", runtime_.rank(), ")") : ""));
  return out;
}

// Old log-probs (only when the policy changes within a cycle; their entropies replace the sampler's)
// and reference log-probs (beta > 0), no grad.
void Trainer::old_and_reference_logps(RolloutBatch& rows, torch::Tensor& entropies) {
  torch::NoGradGuard no_grad;
  if (needs_old_logps_) {
    ops::LogprobsAndEntropies old =
        policy_logprobs(policy_, rows.prompt_ids, rows.completion_ids, rows.completion_mask, rows.prompt_width());
    ++old_logprob_passes_;
    // the batch lives on the host (micro-batches are cut from it by host indices); found on a GPU
    rows.old_logps = old.logps.to(torch::kCPU, logp_dtype_);
    entropies = old.entropies.to(torch::kCPU, logp_dtype_);
  }
  if (cfg_.grpo.beta > 0) {
    // with LoRA the reference is the policy's own base: adapters off for this pass
    std::optional<AdaptersDisabled> base_only;
    if (cfg_.lora.enabled) base_only.emplace(policy_);
    ops::LogprobsAndEntropies ref = policy_logprobs(cfg_.lora.enabled ? policy_ : reference_, rows.prompt_ids,
                                               rows.completion_ids, rows.completion_mask, rows.prompt_width());
    rows.ref_logps = ref.logps.to(torch::kCPU, logp_dtype_);
  }
}

// After a resume in the middle of a cycle: the generation is read back, not regenerated.
Trainer::Generation Trainer::reload_generation(int64_t generation_step) {
  if (!expected_generation_hash_.empty()) {
    // the whole file as the checkpoint saw it: HDF5 checks only part of a file's bytes
    const std::string found = generation_file_hash(generation_step);
    const std::string path = step_file_path((output_dir_ / "rollouts").string(), comm_->rank(), generation_step);
    inputCheck(found == expected_generation_hash_, path, ": ",
               found.empty() ? std::string("missing") : "damaged or replaced since the checkpoint (fnv1a64 " + found + ", the checkpoint recorded " + expected_generation_hash_ + ")",
               "; the stored generation cannot be read back");
    expected_generation_hash_.clear();
  }
  RolloutAttrs attrs;
  const Rollouts stored = read_rollouts((output_dir_ / "rollouts").string(), generation_step, comm_->rank(),
                                        config_hash_, tokenizer_->hash(), &attrs);
  inputCheck(attrs.world_size == comm_->size(), "the checkpoint was taken in the middle of a generation cycle by ",
             attrs.world_size, " training ranks; resume it with ", attrs.world_size, " (now ", comm_->size(), ")");
  Generation generation;
  generation.rows = unpack_rollouts(stored, static_cast<int64_t>(attrs.numbers.at("completion_width")), tokenizer_->pad_id());
  if (!needs_old_logps_) generation.rows.old_logps = torch::Tensor();  // the sampler's, kept for inspection only
  if (cfg_.grpo.beta <= 0) generation.rows.ref_logps = torch::Tensor();
  generation.rows.num_items_in_batch = static_cast<int64_t>(attrs.numbers.at("num_items_in_batch"));
  if (corrects_sampling_)  // the same ratio as at the start of the cycle: both log-probs are stored
    generation.rows.importance_sampling_ratio =
        importance_sampling_ratio(generation.rows.old_logps, generation.rows.sampling_logps,
                                  generation.rows.loss_mask(), importance_sampling_settings_from_config(cfg_))
            .ratio;
  generation.order = micro_batch_order(generation_step, generation.rows.size());
  return generation;
}

// The order in which micro-batches take rows: TRL shuffles the generation batch, then splits it. A
// replayed generation may carry TRL's own permutation.
torch::Tensor Trainer::micro_batch_order(int64_t generation_step, int64_t rows) const {
  runtimeCheck(rows == cfg_.train.per_device_train_batch_size * steps_per_generation_, "generation produced ", rows,
               " completions, expected ", cfg_.train.per_device_train_batch_size * steps_per_generation_);
  if (replay_ && !replay_->at(generation_step, comm_->rank()).shuffle.empty())
    return torch::tensor(replay_->at(generation_step, comm_->rank()).shuffle, torch::kInt64);
  torch::Generator generator = stream_generator(cfg_.train.seed, comm_->rank(), generation_step, "shuffle");
  return torch::randperm(rows, generator, torch::TensorOptions().dtype(torch::kInt64));
}

// Per-token log-probs and entropies of the completion tokens (packed unless train.padding_free is off),
// through the fused LM head (no [B, T, V] logits), logits divided by the sampling temperature as TRL does.
ops::LogprobsAndEntropies Trainer::policy_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                              int64_t prompt_width) {
  ops::AutocastScope autocast(cfg_.train.bf16, device_);
  CompletionLogprobOptions options;
  options.pad_id = tokenizer_->pad_id();
  options.temperature = cfg_.generation.temperature > 0 ? cfg_.generation.temperature : 1.0;
  options.chunk_positions = cfg_.grpo.logprob_chunk_size;
  options.sequence_chunk = cfg_.grpo.logprob_sequence_chunk_size;  // passes without gradients only
  options.packed = cfg_.train.padding_free;
  options.prompt_width = prompt_width;
  return completion_logprobs(model, prompts, completion_ids, completion_mask, options);
}

}  // namespace rayless
