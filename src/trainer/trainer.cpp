// The GRPO training loop, top to bottom in one place (Trainer::run). The rest of this file holds the
// steps it calls: generate + score a batch of rollouts, compute log-probs and the loss of one
// micro-batch, step the optimizer, checkpoint and restore.
//
// Counting follows TRL's GRPOTrainer: a micro-step is one forward/backward over
// per_device_train_batch_size completions; an optimizer step takes gradient_accumulation_steps
// micro-steps; a generation produces steps_per_generation micro-batches per rank and is reused for
// num_iterations (mu) passes, so a new generation starts every steps_per_generation * mu micro-steps.
#include "rayless/trainer.h"

#include <ATen/autocast_mode.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "rayless/checkpoint.h"
#include "rayless/completion_logprobs.h"
#include "rayless/comm.h"
#include "rayless/config.h"
#include "rayless/data_parallel.h"
#include "rayless/dataset.h"
#include "rayless/entropy_threshold.h"
#include "rayless/error.h"
#include "rayless/files.h"
#include "rayless/grpo/advantages.h"
#include "rayless/grpo/entropy_mask.h"
#include "rayless/grpo/logprobs.h"
#include "rayless/grpo/loss.h"
#include "rayless/hash.h"
#include "rayless/hf_checkpoint.h"
#include "rayless/log.h"
#include "rayless/lr_schedule.h"
#include "rayless/metrics.h"
#include "rayless/model.h"
#include "rayless/rewards.h"
#include "rayless/replay.h"
#include "rayless/rollout_store.h"
#include "rayless/runtime.h"
#include "rayless/sampler.h"
#include "rayless/sharding.h"
#include "rayless/signals.h"
#include "rayless/tokenizer.h"
#include "rayless/watchdog.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace rayless {
namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Every random stream derives from (seed, rank, generation step, purpose), so nothing random needs
// saving: a resumed run re-creates the same streams.
uint64_t stream_seed(int64_t seed, int64_t rank, int64_t generation_step, const char* purpose) {
  const std::string key = str(seed, "/", rank, "/", generation_step, "/", purpose);
  return fnv1a64(key.data(), key.size()) & 0x7fffffffffffffffULL;
}

torch::Generator make_generator(uint64_t seed) { return at::detail::createCPUGenerator(seed); }

// One rank's share of one generation: everything the micro-steps of its cycle need.
struct GenerationBatch {
  int64_t generation_step = 0;
  std::vector<std::vector<int64_t>> prompt_ids;  // per completion (prompts repeated G times)
  torch::Tensor completion_ids;                  // [N, T] int64
  torch::Tensor completion_mask;                 // [N, T] float32, truncation masking applied
  torch::Tensor raw_lengths;                     // [N] int64 tokens up to and incl. EOS (before masking)
  torch::Tensor truncated;                       // [N] bool
  torch::Tensor advantages;                      // [N] float32
  torch::Tensor old_logps;                       // [N, T] float32, undefined when mu = 1 skips the pass
  torch::Tensor ref_logps;                       // [N, T] float32 when beta > 0
  int64_t num_items_in_batch = 0;                // active completion tokens of the whole generation, all ranks
  torch::Tensor order;                           // [N] shuffled row order; micro-batch i = rows order[iB:(i+1)B]
  int64_t prompt_width = 0;                      // longest prompt of the batch: TRL's padded positions
  StepMetrics metrics;                           // generation-time metrics (rewards, lengths), global
};

// RAII bfloat16 autocast on CPU/CUDA for the forward pass (train.bf16); fp32 master weights.
class AutocastScope {
 public:
  AutocastScope(bool enabled, torch::Device device) : enabled_(enabled), type_(device.type()) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, previous_);
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
  bool previous_ = false;
  at::DeviceType type_;
};

class Trainer {
 public:
  Trainer(Runtime& runtime, const TrainOptions& options);
  int run();

 private:
  // One rank's rows of a generation before scoring: prompts, dataset rows and completions.
  struct RowsOfRank {
    std::vector<std::vector<int64_t>> prompt_ids;  // per completion row
    std::vector<std::string> prompt_texts;
    std::vector<nlohmann::json> fields;            // dataset row (for rewards)
    std::vector<int64_t> group_index;              // the prompt (group) each row belongs to
    GenerationOutput completions;
  };

  GenerationBatch generate_and_score(int64_t generation_step);
  RowsOfRank sampled_rows(int64_t generation_step);
  RowsOfRank replayed_rows(int64_t generation_step);
  void add_row(RowsOfRank& rows, const PromptRow& row, const std::string& where);
  SamplingParams sampling_params() const;
  StepMetrics generation_metrics(const GenerationBatch& batch, const torch::Tensor& all_rewards_per_func,
                                 const AdvantageOutput& all);
  void store_generation(const GenerationBatch& batch, const RowsOfRank& rows, const torch::Tensor& rewards_per_func,
                        const torch::Tensor& rewards, const torch::Tensor& entropies);
  GenerationBatch reload_generation(int64_t generation_step);
  void finish_generation(GenerationBatch& batch);
  // prompt_width: TRL's absolute positions (the longest prompt of this rank's generation batch)
  LogprobsAndEntropies policy_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                       const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                       int64_t prompt_width);
  StepMetrics train_micro_batch(const GenerationBatch& batch, int64_t micro_index);
  double optimizer_step();
  void save(bool at_optimizer_boundary);
  void restore(const fs::path& checkpoint);
  StepMetrics reduce_step_metrics(const std::vector<StepMetrics>& micro_metrics);

  Runtime& runtime_;
  TrainOptions options_;
  Config cfg_;
  fs::path output_dir_;
  torch::Device device_ = torch::kCPU;
  std::unique_ptr<Communicator> comm_;
  std::shared_ptr<Tokenizer> tokenizer_;
  CausalLM policy_{nullptr};
  CausalLM reference_{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::unique_ptr<DataParallel> data_parallel_;
  PromptDataset dataset_;
  std::unique_ptr<RewardSet> rewards_;
  std::unique_ptr<ReplaySource> replay_;  // train.replay_rollouts: completions from a file, not sampled
  std::unique_ptr<MetricsLog> metrics_log_;
  ShardSpec shard_spec_;
  std::string config_hash_;

  // progress (what a checkpoint stores)
  int64_t optimizer_step_ = 0;   // completed optimizer steps
  int64_t micro_step_ = 0;       // completed micro-steps
  int64_t num_tokens_ = 0;       // prompt + completion tokens seen, all ranks (TRL's num_tokens)
  int64_t last_saved_micro_step_ = -1;

  // derived counts
  int64_t steps_per_generation_ = 1;
  int64_t micro_steps_per_generation_cycle_ = 1;  // steps_per_generation * mu
  bool needs_old_logps_ = false;
  LossSettings loss_settings_;
  torch::Dtype logp_dtype_ = torch::kFloat32;  // log-probs, entropies and the loss: float64 with a float64 model
  int64_t warmup_steps_ = 0;
  int64_t test_signal_micro_step_ = -1;  // RAYLESS_TEST_SIGNAL_AT_MICRO_STEP
  int64_t old_logprob_passes_ = 0;       // no-grad passes for old log-probs (reported per step)
  double sampling_seconds_ = 0;          // parts of the step's time, reported per step: sampling
  double allreduce_seconds_ = 0;         // (inside time/generation), gradient allreduce and
  double optimizer_seconds_ = 0;         // clip + AdamW (inside time/train)
  float step_loss_float32_ = 0.0f;       // this rank's loss summed over the step's micro-steps (float32, as transformers)
};

Trainer::Trainer(Runtime& runtime, const TrainOptions& options) : runtime_(runtime), options_(options) {
  cfg_ = options.config_path.empty() ? config_from_overrides(options.overrides)
                                     : load_config(options.config_path, options.overrides);
  output_dir_ = options.output_dir.empty() ? fs::path(cfg_.train.output_dir) : fs::path(options.output_dir);
  const int threads = runtime_.configure(cfg_.distributed);
  device_ = runtime_.select_device(cfg_.model.device);
  comm_ = make_communicator(runtime_, cfg_.distributed.backend, device_);
  if (runtime_.rank() != 0) {
    fs::create_directories(output_dir_ / "logs");
    open_rank_log_file((output_dir_ / "logs" / str("rank-", runtime_.rank(), ".log")).string());
  }
  torch::manual_seed(cfg_.train.seed);

  check_batch_geometry(cfg_, runtime_.size());
  steps_per_generation_ = cfg_.effective_steps_per_generation(runtime_.size());
  micro_steps_per_generation_cycle_ = steps_per_generation_ * cfg_.grpo.num_iterations;
  // TRL: old log-probs equal the detached current ones when the policy cannot change within a cycle
  needs_old_logps_ = cfg_.train.gradient_accumulation_steps % micro_steps_per_generation_cycle_ != 0;
  warmup_steps_ = warmup_steps_for(cfg_.optim, cfg_.train.max_steps);
  loss_settings_ = loss_settings_from_config(cfg_, runtime_.size());
  config_hash_ = config_hash(cfg_);
  if (const char* at = std::getenv("RAYLESS_TEST_SIGNAL_AT_MICRO_STEP")) test_signal_micro_step_ = std::atoll(at);

  dataset_ = load_prompt_dataset(cfg_.data);
  shard_spec_.num_prompts = static_cast<int64_t>(dataset_.rows.size());
  // every rank walks the whole global batch of prompts and takes its slice of their completions
  shard_spec_.prompts_per_rank = cfg_.global_generation_batch(runtime_.size()) / cfg_.grpo.num_generations;
  shard_spec_.world_size = 1;
  shard_spec_.seed = static_cast<uint64_t>(cfg_.train.seed);
  shard_spec_.shuffle = cfg_.data.shuffle;

  tokenizer_ = load_tokenizer(cfg_.tokenizer.path, cfg_.model.path);
  const torch::Dtype dtype = parse_model_dtype(cfg_.model.dtype);
  logp_dtype_ = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  if (!cfg_.train.replay_rollouts.empty()) replay_ = std::make_unique<ReplaySource>(cfg_.train.replay_rollouts);
  policy_ = load_hf_model(cfg_.model.path, dtype, device_, static_cast<uint64_t>(cfg_.model.init_seed));
  policy_->set_gradient_checkpointing(cfg_.train.gradient_checkpointing);
  if (cfg_.grpo.beta > 0) {
    reference_ = load_hf_model(cfg_.model.path, dtype, device_, static_cast<uint64_t>(cfg_.model.init_seed));
    for (auto& p : reference_->parameters()) p.set_requires_grad(false);
    reference_->eval();
  }
  rewards_ = std::make_unique<RewardSet>(cfg_, runtime_.rank());

  // AdamW with transformers' grouping: no weight decay on biases and norm weights (1-D tensors).
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : policy_->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options_for = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(cfg_.optim.learning_rate)
            .betas({cfg_.optim.adam_beta1, cfg_.optim.adam_beta2})
            .eps(cfg_.optim.adam_epsilon)
            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options_for(cfg_.optim.weight_decay));
  groups.emplace_back(no_decay, options_for(0.0));
  optimizer_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(cfg_.optim.learning_rate));
  data_parallel_ = std::make_unique<DataParallel>(*comm_, *policy_, cfg_.distributed.bucket_size_mb);

  log_info(str("rayless train: ", runtime_.size(), " rank(s) x ", threads, " thread(s), device ", device_.str(),
               ", model ", cfg_.model.path, " (", policy_->config().num_parameters(), " parameters), ",
               dataset_.rows.size(), " prompts, output ", output_dir_.string()));
  if (dataset_.skipped_lines > 0)
    log_warn(str("skipped ", dataset_.skipped_lines, " invalid lines of ", dataset_.path, " (first: ",
                 dataset_.first_skip_reason, ")"));
}

// ---------------------------------------------------------------------------------------------------
// The loop.
int Trainer::run() {
  install_stop_signal_handlers();
  fs::create_directories(output_dir_);
  const fs::path checkpoints = output_dir_ / "checkpoints";
  const std::optional<fs::path> resume_from = resolve_resume(options_.resume, checkpoints);
  if (resume_from) restore(*resume_from);
  data_parallel_->broadcast_parameters(0);  // identical replicas from the start (or from the checkpoint)
  if (runtime_.rank() == 0) {
    write_text_atomically(output_dir_ / "config.resolved.toml", config_to_toml(cfg_));
    metrics_log_ = std::make_unique<MetricsLog>(output_dir_ / "metrics.jsonl", resume_from ? optimizer_step_ : -1);
  }

  const int64_t micro_steps_per_optimizer_step = cfg_.train.gradient_accumulation_steps;
  const int64_t total_micro_steps = cfg_.train.max_steps * micro_steps_per_optimizer_step;
  GenerationBatch batch;
  bool have_batch = false;
  std::vector<StepMetrics> micro_metrics;
  std::vector<StepMetrics> generations_this_step;  // TRL averages a step's generations' metrics
  double generation_seconds = 0, train_seconds = 0;
  auto step_start = Clock::now();
  const auto run_start = Clock::now();
  const int64_t first_step = optimizer_step_;

  while (micro_step_ < total_micro_steps) {
    set_watchdog_step(optimizer_step_);
    const int64_t generation_step = micro_step_ / micro_steps_per_generation_cycle_;
    const int64_t position_in_cycle = micro_step_ % micro_steps_per_generation_cycle_;

    // 1. A new generation at the start of each cycle; after a resume mid-cycle, the stored one.
    if (!have_batch || batch.generation_step != generation_step) {
      const auto t0 = Clock::now();
      batch = position_in_cycle == 0 ? generate_and_score(generation_step) : reload_generation(generation_step);
      generation_seconds += seconds_since(t0);
      if (!batch.metrics.empty()) generations_this_step.push_back(batch.metrics);
      have_batch = true;
    }

    // 2. One micro-step: log-probs, loss, backward (gradients accumulate locally).
    const auto t1 = Clock::now();
    micro_metrics.push_back(train_micro_batch(batch, position_in_cycle % steps_per_generation_));
    ++micro_step_;
    train_seconds += seconds_since(t1);

    // 3. Every gradient_accumulation_steps micro-steps: allreduce, clip, AdamW, schedule, log.
    if (micro_step_ % micro_steps_per_optimizer_step == 0) {
      const auto t2 = Clock::now();
      const double grad_norm = optimizer_step();
      train_seconds += seconds_since(t2);
      ++optimizer_step_;

      StepMetrics m = reduce_step_metrics(micro_metrics);
      micro_metrics.clear();
      for (const auto& [k, v] : reduce_step_metrics(generations_this_step)) m[k] = v;
      if (!generations_this_step.empty()) m["num_tokens"] = static_cast<double>(num_tokens_);  // a running total
      const double step_time = seconds_since(step_start);
      step_start = Clock::now();
      m["grad_norm"] = grad_norm;
      // the loss summed over the step's micro-steps in float32 (each already divided for
      // accumulation), its float32 mean over ranks: what transformers logs for TRL
      m["loss"] = comm_->allgather(torch::tensor({step_loss_float32_}, torch::kFloat32)).mean().item<double>();
      step_loss_float32_ = 0.0f;
      m["learning_rate"] = cfg_.optim.learning_rate *
                           lr_multiplier(cfg_.optim.lr_scheduler_type, optimizer_step_ - 1, warmup_steps_, cfg_.train.max_steps);
      m["old_logprob_passes"] = static_cast<double>(old_logprob_passes_);  // μ = 1 skips this pass
      old_logprob_passes_ = 0;
      m["time/sampling"] = sampling_seconds_;
      m["time/gradient_allreduce"] = allreduce_seconds_;
      m["time/optimizer"] = optimizer_seconds_;
      sampling_seconds_ = allreduce_seconds_ = optimizer_seconds_ = 0;
      m["step_time"] = step_time;
      m["time/generation"] = generation_seconds;
      m["time/train"] = train_seconds;
      m["tokens_per_second"] = m.count("completions/total_tokens") ? m["completions/total_tokens"] / std::max(step_time, 1e-9) : NAN;
      m["memory/peak_rss_mb"] = global_max(*comm_, static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0));
      generation_seconds = train_seconds = 0;
      generations_this_step.clear();
      if (runtime_.rank() == 0) {
        metrics_log_->write(optimizer_step_, m);
        const double per_step = seconds_since(run_start) / static_cast<double>(optimizer_step_ - first_step);
        if (cfg_.log.console && (optimizer_step_ % cfg_.log.logging_steps == 0 || optimizer_step_ == cfg_.train.max_steps))
          log_info(progress_line(optimizer_step_, cfg_.train.max_steps, m,
                                 per_step * static_cast<double>(cfg_.train.max_steps - optimizer_step_)));
      }
      if (cfg_.grpo.sync_ref_model && optimizer_step_ % cfg_.grpo.ref_model_sync_steps == 0) {
        torch::NoGradGuard no_grad;
        auto ref_params = reference_->parameters();
        auto policy_params = policy_->parameters();
        const double alpha = cfg_.grpo.ref_model_mixup_alpha;
        for (size_t i = 0; i < ref_params.size(); ++i) ref_params[i].mul_(1.0 - alpha).add_(policy_params[i], alpha);
      }
      if (cfg_.checkpoint.save_steps > 0 && optimizer_step_ % cfg_.checkpoint.save_steps == 0 &&
          micro_step_ < total_micro_steps)
        save(true);
    }

    // Test hook: raise a real SIGTERM on rank 0 after a given micro-step (resume tests).
    if (micro_step_ == test_signal_micro_step_ && runtime_.rank() == 0) std::raise(SIGTERM);

    // 4. A signal on any rank: all ranks agree here, checkpoint, and stop.
    if (cfg_.checkpoint.save_on_signal && micro_step_ < total_micro_steps &&
        global_max(*comm_, stop_requested() ? 1.0 : 0.0) > 0) {
      save(micro_step_ % micro_steps_per_optimizer_step == 0);
      log_info(str("rayless train: stopped by signal after step ", optimizer_step_, " (micro-step ", micro_step_,
                   "); resume with --resume auto"));
      return kExitCheckpointedOnSignal;
    }
  }
  save(true);
  log_info(str("rayless train: done, ", optimizer_step_, " steps; checkpoint in ", (checkpoints / "latest").string()));
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------------
// Generation: prompts of this rank -> completions -> rewards -> advantages -> (old/ref log-probs) -> store.
GenerationBatch Trainer::generate_and_score(int64_t generation_step) {
  const int rank = runtime_.rank();
  const int64_t G = cfg_.grpo.num_generations;
  GenerationBatch batch;
  batch.generation_step = generation_step;

  // 1. this rank's completion rows, their prompts (tokens as TRL builds them) and completions
  RowsOfRank rows = replay_ ? replayed_rows(generation_step) : sampled_rows(generation_step);
  const int64_t N = static_cast<int64_t>(rows.prompt_ids.size());
  batch.prompt_ids = rows.prompt_ids;
  batch.completion_ids = rows.completions.completion_ids.to(torch::kCPU);
  batch.truncated = rows.completions.truncated.to(torch::kCPU).to(torch::kBool);
  batch.raw_lengths = rows.completions.completion_mask.sum(1).to(torch::kInt64).cpu();
  batch.completion_mask = rows.completions.completion_mask.to(torch::kFloat32).cpu();
  if (cfg_.grpo.mask_truncated_completions)
    batch.completion_mask = batch.completion_mask * (~batch.truncated).unsqueeze(1).to(torch::kFloat32);
  finish_generation(batch);

  // 2. rewards of every function, then advantages over the whole global batch (as TRL, which gathers
  //    the table and holds it in float32, so a group may span ranks)
  std::vector<std::string> completion_texts;
  std::vector<int64_t> completion_counts;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t length = batch.raw_lengths[i].item<int64_t>();
    auto ids_tensor = batch.completion_ids[i].slice(0, 0, length).contiguous();
    std::vector<int64_t> ids(ids_tensor.data_ptr<int64_t>(), ids_tensor.data_ptr<int64_t>() + length);
    completion_texts.push_back(tokenizer_->decode(ids, /*skip_special_tokens=*/true));
    completion_counts.push_back(length);
  }
  const torch::Tensor rewards_per_func =
      rewards_->score(rows.prompt_texts, completion_texts, completion_counts, rows.fields).to(torch::kFloat32);
  const torch::Tensor all_rewards_per_func = torch::cat(comm_->allgather_variable(rewards_per_func), 0);
  AdvantageSettings adv;
  adv.num_generations = G;
  adv.scale_rewards = cfg_.grpo.scale_rewards;
  adv.multi_objective_aggregation = cfg_.grpo.multi_objective_aggregation;
  const AdvantageOutput all = compute_advantages(all_rewards_per_func, rewards_->weights(), adv);
  const int64_t first_row = rank * N;  // every rank holds per_device_train_batch_size x steps_per_generation rows
  batch.advantages = all.advantages.slice(0, first_row, first_row + N);
  const torch::Tensor rewards = all.rewards.slice(0, first_row, first_row + N);

  // 3. old log-probs (only when the policy changes within a cycle) and reference log-probs (beta > 0)
  torch::Tensor entropies;
  {
    torch::NoGradGuard no_grad;
    if (needs_old_logps_) {
      LogprobsAndEntropies old = policy_logprobs(policy_, batch.prompt_ids, batch.completion_ids, batch.completion_mask,
                                                 batch.prompt_width);
      ++old_logprob_passes_;
      batch.old_logps = old.logps.to(logp_dtype_);
      entropies = old.entropies.to(logp_dtype_);
    }
    if (cfg_.grpo.beta > 0) {
      LogprobsAndEntropies ref = policy_logprobs(reference_, batch.prompt_ids, batch.completion_ids, batch.completion_mask,
                                                 batch.prompt_width);
      batch.ref_logps = ref.logps.to(logp_dtype_);
    }
  }
  batch.num_items_in_batch = global_sum(*comm_, static_cast<int64_t>(batch.completion_mask.sum().item<double>()));
  batch.metrics = generation_metrics(batch, all_rewards_per_func, all);
  store_generation(batch, rows, rewards_per_func, rewards, entropies);
  return batch;
}

// This rank's slice of the generation batch, as TRL's RepeatSampler and accelerate lay it out: the
// global batch of prompts (each repeated num_generations times, consecutively) cut into equal
// per-rank slices of per_device_train_batch_size x steps_per_generation completions. Groups are whole
// on a rank when that count is a multiple of num_generations, else they may span ranks.
Trainer::RowsOfRank Trainer::sampled_rows(int64_t generation_step) {
  const int rank = runtime_.rank();
  const int64_t G = cfg_.grpo.num_generations;
  const int64_t N = cfg_.train.per_device_train_batch_size * steps_per_generation_;
  const PromptShard shard = shard_prompts(shard_spec_, 0, cursor_at_step(shard_spec_, generation_step));
  RowsOfRank rows;
  std::vector<std::vector<int64_t>> unique_prompts;  // one per group present on this rank
  for (int64_t i = rank * N; i < (rank + 1) * N; ++i) {
    const int64_t dataset_row = shard.rows[static_cast<size_t>(i / G)];
    const PromptRow& row = dataset_.rows[static_cast<size_t>(dataset_row)];
    add_row(rows, row, str(dataset_.path, ":", row.line));
    rows.group_index.push_back(dataset_row);
    if (i % G == 0) unique_prompts.push_back(rows.prompt_ids.back());
  }

  // sample the completions in one batched, KV-cached pass: G per prompt when the groups are whole
  // here, else one per row
  const bool whole_groups = (rank * N) % G == 0 && N % G == 0;
  SamplingParams params = sampling_params();
  params.num_generations = whole_groups ? G : 1;
  torch::Generator generator = make_generator(stream_seed(cfg_.train.seed, rank, generation_step, "sample"));
  policy_->eval();
  const auto sampling_start = Clock::now();
  rows.completions = generate(policy_, whole_groups ? unique_prompts : rows.prompt_ids, params, generator, tokenizer_.get());
  sampling_seconds_ += seconds_since(sampling_start);
  policy_->train();
  return rows;
}

// The rows of a replayed generation (train.replay_rollouts): prompts built by rayless from the
// dataset rows and checked against the file's tokens, completions as the file has them.
Trainer::RowsOfRank Trainer::replayed_rows(int64_t generation_step) {
  const ReplayedGeneration& g = replay_->at(generation_step, runtime_.rank());
  const int64_t N = static_cast<int64_t>(g.rows.size());
  inputCheck(N == cfg_.train.per_device_train_batch_size * steps_per_generation_, g.where, ": ", N,
             " rows, but one generation of this config has per_device_train_batch_size x steps_per_generation = ",
             cfg_.train.per_device_train_batch_size * steps_per_generation_, " per rank");
  RowsOfRank rows;
  for (int64_t i = 0; i < N; ++i) {
    PromptRow row;
    row.fields = g.rows[static_cast<size_t>(i)];
    const std::string problem = parse_prompt_row(row.fields, cfg_.data.prompt_field, cfg_.data.messages_field, row);
    inputCheck(problem.empty(), g.where, ": row ", i, ": ", problem);
    add_row(rows, row, str(g.where, " row ", i));
    rows.group_index.push_back((runtime_.rank() * N + i) / cfg_.grpo.num_generations);
    if (!g.prompt_ids.empty())
      inputCheck(rows.prompt_ids.back() == g.prompt_ids[static_cast<size_t>(i)], g.where, ": row ", i,
                 ": the file's prompt_ids differ from rayless's tokens of the prompt (", rows.prompt_ids.back().size(),
                 " tokens vs ", g.prompt_ids[static_cast<size_t>(i)].size(), "): check the tokenizer and chat template");
  }
  // right-padded completions; a completion ends with EOS, or is truncated (TRL: its last token is
  // neither EOS nor padding)
  int64_t width = 0;
  for (const auto& c : g.completion_ids) width = std::max<int64_t>(width, static_cast<int64_t>(c.size()));
  const SamplingParams params = sampling_params();
  GenerationOutput& out = rows.completions;
  out.completion_ids = torch::full({N, width}, params.pad_id, torch::kInt64);
  out.completion_mask = torch::zeros({N, width}, torch::kInt64);
  out.truncated = torch::zeros({N}, torch::kBool);
  for (int64_t i = 0; i < N; ++i) {
    const auto& c = g.completion_ids[static_cast<size_t>(i)];
    const int64_t length = static_cast<int64_t>(c.size());
    out.completion_ids[i].slice(0, 0, length).copy_(torch::tensor(c, torch::kInt64));
    out.completion_mask[i].slice(0, 0, length).fill_(1);
    const bool ends = c.back() == params.pad_id ||
                      std::find(params.eos_ids.begin(), params.eos_ids.end(), c.back()) != params.eos_ids.end();
    out.truncated[i] = !ends;
  }
  return rows;
}

// One completion row: its prompt as TRL builds it (a plain-text prompt tokenized with the
// tokenizer's special tokens, as tokenizer(text) does; a chat row through the template), truncated
// by data.max_prompt_length.
void Trainer::add_row(RowsOfRank& rows, const PromptRow& row, const std::string& where) {
  std::string text;
  std::vector<int64_t> ids;
  if (row.is_chat()) {
    std::vector<ChatMessage> messages;
    for (const auto& m : row.messages) messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    text = apply_chat_template(cfg_.tokenizer.chat_template == "none" ? "chatml" : cfg_.tokenizer.chat_template, messages);
    ids = tokenizer_->encode(text);
  } else {
    text = format_prompt(cfg_.tokenizer.chat_template, cfg_.tokenizer.system_prompt, row.prompt);
    ids = tokenizer_->encode(text);
    if (cfg_.tokenizer.chat_template == "none") ids = tokenizer_->add_special_tokens(std::move(ids));
  }
  rows.prompt_ids.push_back(truncate_prompt_ids(ids, cfg_.data.max_prompt_length, cfg_.data.truncation, where));
  rows.prompt_texts.push_back(text);
  rows.fields.push_back(row.fields);
}

SamplingParams Trainer::sampling_params() const {
  SamplingParams params;
  params.max_new_tokens = cfg_.generation.max_completion_length;
  params.temperature = cfg_.generation.temperature;
  params.greedy = cfg_.generation.temperature == 0.0;
  params.top_k = cfg_.generation.top_k;
  params.top_p = cfg_.generation.top_p;
  params.min_p = cfg_.generation.min_p;
  params.repetition_penalty = cfg_.generation.repetition_penalty;
  params.eos_ids = cfg_.generation.eos_token_ids.empty() ? tokenizer_->eos_ids() : cfg_.generation.eos_token_ids;
  params.stop_strings = cfg_.generation.stop_strings;
  params.pad_id = tokenizer_->pad_id();
  params.return_logprobs = !needs_old_logps_;
  return params;
}

// The generation's metrics over all ranks, as TRL computes them (its float32 arithmetic where it
// has one: lengths, ratios and rewards).
StepMetrics Trainer::generation_metrics(const GenerationBatch& batch, const torch::Tensor& all_rewards_per_func,
                                        const AdvantageOutput& all) {
  const torch::Tensor lengths = torch::cat(comm_->allgather_variable(batch.raw_lengths), 0).to(torch::kFloat32);
  const torch::Tensor truncated = torch::cat(comm_->allgather_variable(batch.truncated), 0);
  int64_t prompt_tokens = 0;
  for (const auto& p : batch.prompt_ids) prompt_tokens += static_cast<int64_t>(p.size());
  num_tokens_ += global_sum(*comm_, prompt_tokens) + static_cast<int64_t>(lengths.sum().item<double>());
  StepMetrics m;
  m["completions/mean_length"] = lengths.mean().item<double>();
  m["completions/min_length"] = lengths.min().item<double>();
  m["completions/max_length"] = lengths.max().item<double>();
  m["completions/clipped_ratio"] = truncated.to(torch::kFloat32).mean().item<double>();
  torch::Tensor terminated = lengths.masked_select(~truncated);
  if (terminated.numel() == 0) terminated = torch::zeros({1}, torch::kFloat32);  // TRL's edge case
  m["completions/mean_terminated_length"] = terminated.mean().item<double>();
  m["completions/min_terminated_length"] = terminated.min().item<double>();
  m["completions/max_terminated_length"] = terminated.max().item<double>();
  m["completions/total_tokens"] = lengths.sum().item<double>();
  const RewardMetrics r = reward_metrics(all_rewards_per_func, all);
  for (size_t k = 0; k < rewards_->names().size(); ++k) {
    m["rewards/" + rewards_->names()[k] + "/mean"] = r.function_mean[k];
    m["rewards/" + rewards_->names()[k] + "/std"] = r.function_std[k];
  }
  m["reward"] = r.reward;
  m["reward_std"] = r.reward_std;
  m["frac_reward_zero_std"] = r.frac_reward_zero_std;
  return m;
}

// The rollout store: what this rank generated, for mu > 1 reuse, resume and inspection. Rows are
// stored unpadded (tokens up to and including EOS); the padded width is kept as an attribute.
void Trainer::store_generation(const GenerationBatch& batch, const RowsOfRank& rows, const torch::Tensor& rewards_per_func,
                               const torch::Tensor& rewards, const torch::Tensor& entropies) {
  const int64_t N = batch.completion_ids.size(0);
  Rollouts r;
  r.step = batch.generation_step;
  r.rank = runtime_.rank();
  std::vector<int64_t> flat_prompts, prompt_offsets{0}, completion_offsets{0};
  for (int64_t i = 0; i < N; ++i) {
    const auto& p = batch.prompt_ids[static_cast<size_t>(i)];
    flat_prompts.insert(flat_prompts.end(), p.begin(), p.end());
    prompt_offsets.push_back(static_cast<int64_t>(flat_prompts.size()));
    completion_offsets.push_back(completion_offsets.back() + batch.raw_lengths[i].item<int64_t>());
  }
  const int64_t T = batch.completion_ids.size(1);
  const torch::Tensor real = torch::arange(T).unsqueeze(0) < batch.raw_lengths.unsqueeze(1);  // [N, T]
  auto flat = [&](const torch::Tensor& padded) { return padded.cpu().masked_select(real).contiguous(); };
  auto i64 = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); };
  const GenerationOutput& out = rows.completions;
  r.prompt_ids = i64(flat_prompts);
  r.prompt_offsets = i64(prompt_offsets);
  r.completion_ids = flat(batch.completion_ids);
  r.completion_offsets = i64(completion_offsets);
  r.group_index = i64(rows.group_index);
  r.rewards_per_func = rewards_per_func.to(torch::kFloat64);
  r.rewards = rewards.to(torch::kFloat64);
  r.advantages = batch.advantages;
  r.completion_mask = flat(batch.completion_mask).to(torch::kBool);
  if (batch.old_logps.defined()) r.old_logps = flat(batch.old_logps);
  else if (out.logprobs.defined()) r.old_logps = flat(out.logprobs.to(logp_dtype_));
  if (entropies.defined()) r.entropies = flat(entropies);
  else if (out.entropies.defined()) r.entropies = flat(out.entropies);  // no old-log-prob pass: the sampler's
  if (batch.ref_logps.defined()) r.ref_logps = flat(batch.ref_logps);
  r.truncated = batch.truncated;
  RolloutAttrs attrs;
  attrs.world_size = runtime_.size();
  attrs.num_generations = cfg_.grpo.num_generations;
  attrs.reward_names = rewards_->names();
  attrs.reward_weights = rewards_->weights();
  attrs.config_hash = config_hash_;
  attrs.tokenizer_hash = tokenizer_->hash();
  attrs.tokenizer = cfg_.tokenizer.path.empty() ? (fs::path(cfg_.model.path) / "tokenizer.json").string() : cfg_.tokenizer.path;
  attrs.numbers["old_logps_are_sampling_logps"] = batch.old_logps.defined() ? 0.0 : 1.0;
  attrs.numbers["num_items_in_batch"] = static_cast<double>(batch.num_items_in_batch);
  attrs.numbers["temperature"] = cfg_.generation.temperature;
  attrs.numbers["completion_width"] = static_cast<double>(T);
  attrs.numbers["beta"] = cfg_.grpo.beta;
  write_rollouts((output_dir_ / "rollouts").string(), r, attrs);
}

// After a resume in the middle of a cycle: the generation is read back, not regenerated.
GenerationBatch Trainer::reload_generation(int64_t generation_step) {
  RolloutAttrs attrs;
  const Rollouts r = read_rollouts((output_dir_ / "rollouts").string(), generation_step, runtime_.rank(), config_hash_,
                                   tokenizer_->hash(), &attrs);
  inputCheck(attrs.world_size == runtime_.size(), "the checkpoint was taken in the middle of a generation cycle by ",
             attrs.world_size, " ranks; resume it with ", attrs.world_size, " ranks (now ", runtime_.size(), ")");
  GenerationBatch batch;
  batch.generation_step = generation_step;
  const int64_t N = r.size();
  const int64_t T = static_cast<int64_t>(attrs.numbers.at("completion_width"));
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = r.prompt_offsets[i].item<int64_t>(), b = r.prompt_offsets[i + 1].item<int64_t>();
    auto slice = r.prompt_ids.slice(0, a, b).contiguous();
    batch.prompt_ids.emplace_back(slice.data_ptr<int64_t>(), slice.data_ptr<int64_t>() + (b - a));
  }
  // back to the padded [N, T] layout the generation had, so every tensor shape (and result) is the same
  const torch::Tensor lengths = r.completion_offsets.slice(0, 1) - r.completion_offsets.slice(0, 0, N);
  const torch::Tensor real = torch::arange(T).unsqueeze(0) < lengths.unsqueeze(1);
  auto padded = [&](const torch::Tensor& flat_values, double fill, torch::Dtype dtype) {
    torch::Tensor out = torch::full({N, T}, fill, torch::TensorOptions().dtype(dtype));
    out.masked_scatter_(real, flat_values.to(dtype));
    return out;
  };
  batch.completion_ids = padded(r.completion_ids, static_cast<double>(tokenizer_->pad_id()), torch::kInt64);
  batch.completion_mask = padded(r.completion_mask, 0.0, torch::kFloat32);
  batch.truncated = r.truncated.to(torch::kBool);
  batch.raw_lengths = lengths.to(torch::kInt64);
  batch.advantages = r.advantages.to(torch::kFloat32);
  if (needs_old_logps_) batch.old_logps = padded(r.old_logps, 0.0, torch::kFloat32);
  if (cfg_.grpo.beta > 0) batch.ref_logps = padded(r.ref_logps, 0.0, torch::kFloat32);
  batch.num_items_in_batch = static_cast<int64_t>(attrs.numbers.at("num_items_in_batch"));
  finish_generation(batch);
  return batch;
}

// The shuffled order in which micro-batches take rows (TRL shuffles the generation batch, then splits),
// and the prompt width TRL's padding gives every micro-batch of the generation.
void Trainer::finish_generation(GenerationBatch& batch) {
  const int64_t N = batch.completion_ids.size(0);
  batch.prompt_width = 0;
  for (const auto& p : batch.prompt_ids) batch.prompt_width = std::max<int64_t>(batch.prompt_width, static_cast<int64_t>(p.size()));
  runtimeCheck(N == cfg_.train.per_device_train_batch_size * steps_per_generation_,
               "generation produced ", N, " completions, expected ", cfg_.train.per_device_train_batch_size * steps_per_generation_);
  if (replay_ && !replay_->at(batch.generation_step, runtime_.rank()).shuffle.empty()) {
    batch.order = torch::tensor(replay_->at(batch.generation_step, runtime_.rank()).shuffle, torch::kInt64);
    return;
  }
  torch::Generator generator = make_generator(stream_seed(cfg_.train.seed, runtime_.rank(), batch.generation_step, "shuffle"));
  batch.order = torch::randperm(N, generator, torch::TensorOptions().dtype(torch::kInt64));
}

// Per-token log-probs and entropies of the completion tokens (packed unless train.padding_free is off),
// through the fused LM head (no [B, T, V] logits), logits divided by the sampling temperature as TRL does.
LogprobsAndEntropies Trainer::policy_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                              int64_t prompt_width) {
  AutocastScope autocast(cfg_.train.bf16, device_);
  CompletionLogprobOptions options;
  options.pad_id = tokenizer_->pad_id();
  options.temperature = cfg_.generation.temperature > 0 ? cfg_.generation.temperature : 1.0;
  options.chunk_positions = cfg_.grpo.logprob_chunk_size;
  options.packed = cfg_.train.padding_free;
  options.prompt_width = prompt_width;
  return completion_logprobs(model, prompts, completion_ids, completion_mask, options);
}

// One micro-batch: forward with grad, entropy mask (global threshold), loss, backward.
StepMetrics Trainer::train_micro_batch(const GenerationBatch& batch, int64_t micro_index) {
  const int64_t B = cfg_.train.per_device_train_batch_size;
  const torch::Tensor rows = batch.order.slice(0, micro_index * B, (micro_index + 1) * B);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < rows.size(0); ++i) prompts.push_back(batch.prompt_ids[static_cast<size_t>(rows[i].item<int64_t>())]);
  const torch::Tensor completion_ids = batch.completion_ids.index_select(0, rows);
  const torch::Tensor completion_mask = batch.completion_mask.index_select(0, rows).to(device_);
  LogprobsAndEntropies current = policy_logprobs(policy_, prompts, completion_ids, completion_mask, batch.prompt_width);
  LossInputs in;
  in.per_token_logps = current.logps.to(logp_dtype_);
  if (batch.old_logps.defined()) in.old_per_token_logps = batch.old_logps.index_select(0, rows).to(device_);
  if (batch.ref_logps.defined()) in.ref_per_token_logps = batch.ref_logps.index_select(0, rows).to(device_);
  in.advantages = batch.advantages.index_select(0, rows).to(device_);
  in.completion_mask = completion_mask;
  in.entropies = current.entropies.detach().to(logp_dtype_);

  StepMetrics extra;
  if (cfg_.grpo.top_entropy_quantile < 1.0) {
    // the threshold is a quantile over the active tokens of all ranks, taken in float32 as TRL does
    const torch::Tensor active =
        in.entropies.masked_select(completion_mask.to(torch::kBool)).to(torch::kFloat32).contiguous().cpu();
    const float threshold = global_entropy_threshold(*comm_, active, cfg_.grpo.top_entropy_quantile,
                                                     cfg_.grpo.entropy_threshold_method);
    in.entropy_mask = entropy_mask(in.entropies, completion_mask, threshold);
    extra["entropy_threshold"] = threshold;
    // the store records the threshold of each generation's first micro-batch, for `rayless inspect`
    if (micro_step_ % micro_steps_per_generation_cycle_ == 0)
      set_rollout_attribute((output_dir_ / "rollouts").string(), batch.generation_step, runtime_.rank(),
                            "entropy_threshold", threshold);
  }
  in.num_items_in_batch = static_cast<double>(batch.num_items_in_batch);
  const LossOutput out = compute_loss(in, loss_settings_);
  out.loss.backward();

  // metrics over all ranks in two collectives: means from their summed parts, extremes NaN-ignoring
  // (minima travel negated so one max-allreduce serves both)
  std::vector<double> parts, extremes;
  for (const auto& [name, part] : out.means) parts.insert(parts.end(), {part.sum, part.count});
  // TRL's logged loss is transformers' running total: a float32 tensor that each micro-step's loss
  // is added to, averaged over ranks when the step is logged
  step_loss_float32_ = static_cast<float>(static_cast<double>(step_loss_float32_) + out.loss.detach().item<double>());
  for (const auto& [name, value] : out.minima) extremes.push_back(std::isnan(value) ? -INFINITY : -value);
  for (const auto& [name, value] : out.maxima) extremes.push_back(std::isnan(value) ? -INFINITY : value);
  torch::Tensor summed = torch::tensor(parts, torch::kFloat64);
  torch::Tensor maxed = torch::tensor(extremes, torch::kFloat64);
  if (summed.numel() > 0) comm_->allreduce(summed, ReduceOp::Sum);
  if (maxed.numel() > 0) comm_->allreduce(maxed, ReduceOp::Max);
  StepMetrics m;
  int64_t i = 0;
  for (const auto& [name, part] : out.means) {
    m[name] = MeanPart{summed[2 * i].item<double>(), summed[2 * i + 1].item<double>(), part.single_precision}.value();
    ++i;
  }
  i = 0;
  for (const auto& [name, value] : out.minima) m[name] = -maxed[i++].item<double>();
  for (const auto& [name, value] : out.maxima) m[name] = maxed[i++].item<double>();
  for (auto& [name, value] : m)
    if (std::isinf(value)) value = NAN;  // no rank had a value
  for (const auto& [k, v] : extra) m[k] = v;
  return m;
}

// Average gradients over ranks, clip, AdamW with the scheduled learning rate. Returns the grad norm.
double Trainer::optimizer_step() {
  const auto allreduce_start = Clock::now();
  data_parallel_->allreduce_gradients();
  allreduce_seconds_ += seconds_since(allreduce_start);
  const auto optimizer_start = Clock::now();
  double grad_norm = NAN;
  std::vector<torch::Tensor> parameters = policy_->parameters();
  // the norm is reported without clipping too (transformers clips at infinity to measure it)
  grad_norm = torch::nn::utils::clip_grad_norm_(
      parameters, cfg_.optim.max_grad_norm > 0 ? cfg_.optim.max_grad_norm : std::numeric_limits<double>::infinity());
  const double lr = cfg_.optim.learning_rate *
                    lr_multiplier(cfg_.optim.lr_scheduler_type, optimizer_step_, warmup_steps_, cfg_.train.max_steps);
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  optimizer_->step();
  optimizer_->zero_grad(true);
  optimizer_seconds_ += seconds_since(optimizer_start);
  return grad_norm;
}

// Each micro-step's (or generation's) metrics are already global; the step's value is their mean over
// its micro-steps (generations), NaN left out, as TRL averages what it collected between logs.
StepMetrics Trainer::reduce_step_metrics(const std::vector<StepMetrics>& micro_metrics) {
  StepMetrics sums;
  std::map<std::string, int64_t> counts;
  for (const StepMetrics& local : micro_metrics) {
    for (const auto& [name, value] : local) {
      if (std::isnan(value)) continue;
      sums[name] += value;
      counts[name] += 1;
    }
  }
  for (auto& [name, value] : sums) value /= static_cast<double>(counts[name]);
  return sums;
}

// ---------------------------------------------------------------------------------------------------
// Checkpoints: the model as an HF directory, AdamW state, progress counters, and this rank's
// accumulated gradients when taken between optimizer steps.
void Trainer::save(bool at_optimizer_boundary) {
  if (last_saved_micro_step_ == micro_step_) return;
  const std::string name = checkpoint_name(optimizer_step_, micro_step_, at_optimizer_boundary);
  const int rank = runtime_.rank();
  auto fill_rank0 = [&](const fs::path& dir) {
    write_hf_files(policy_, tokenizer_.get(), dir);
    torch::save(*optimizer_, (dir / "optimizer.pt").string());
    if (cfg_.grpo.sync_ref_model) torch::save(reference_->parameters(), (dir / "reference.pt").string());
    nlohmann::json state;
    state["optimizer_step"] = optimizer_step_;
    state["micro_step"] = micro_step_;
    state["num_tokens"] = num_tokens_;
    state["world_size"] = runtime_.size();
    state["config_hash"] = config_hash_;
    state["tokenizer_hash"] = tokenizer_->hash();
    state["seed"] = cfg_.train.seed;
    const ShardCursor next = cursor_at_step(shard_spec_, micro_step_ / micro_steps_per_generation_cycle_);
    state["data_cursor"] = {{"epoch", next.epoch}, {"offset", next.offset}};
    state["generation_step"] = micro_step_ / micro_steps_per_generation_cycle_;
    state["position_in_cycle"] = {{"iteration", (micro_step_ % micro_steps_per_generation_cycle_) / steps_per_generation_},
                                  {"micro_batch", micro_step_ % steps_per_generation_}};
    write_text_atomically(dir / "trainer_state.json", state.dump(2) + "\n");
  };
  auto fill_each_rank = [&](const fs::path& dir) {
    nlohmann::json rank_state;
    rank_state["rank"] = rank;
    rank_state["random_streams"] = {{"seed", cfg_.train.seed},
                                    {"derivation", "fnv1a64(seed/rank/generation_step/purpose), purposes: sample, shuffle"}};
    rank_state["has_accumulated_gradients"] = !at_optimizer_boundary;
    rank_state["step_loss_float32"] = step_loss_float32_;  // the logged loss's running total mid-step
    write_text_atomically(dir / str("rank-", rank, ".json"), rank_state.dump(2) + "\n");
    if (!at_optimizer_boundary) {
      std::vector<torch::Tensor> grads;
      for (const auto& p : policy_->parameters()) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
      torch::save(grads, (dir / str("grads-rank-", rank, ".pt")).string());
    }
  };
  const fs::path path = save_checkpoint(*comm_, output_dir_ / "checkpoints", name, fill_rank0, fill_each_rank,
                                        cfg_.checkpoint.keep_last);
  last_saved_micro_step_ = micro_step_;
  log_info(str("checkpoint: ", path.string()));
}

void Trainer::restore(const fs::path& checkpoint) {
  const nlohmann::json state = nlohmann::json::parse(read_text_file(checkpoint / "trainer_state.json"));
  optimizer_step_ = state.at("optimizer_step").get<int64_t>();
  micro_step_ = state.at("micro_step").get<int64_t>();
  num_tokens_ = state.at("num_tokens").get<int64_t>();
  const int64_t saved_world = state.at("world_size").get<int64_t>();
  const bool mid_cycle = micro_step_ % micro_steps_per_generation_cycle_ != 0;
  const bool mid_accumulation = micro_step_ % cfg_.train.gradient_accumulation_steps != 0;
  inputCheck(saved_world == runtime_.size() || (!mid_cycle && !mid_accumulation), checkpoint.string(),
             " was taken by ", saved_world, " ranks in the middle of a generation cycle; resume it with ", saved_world,
             " ranks (now ", runtime_.size(), ")");
  inputCheck(state.at("config_hash").get<std::string>() == config_hash_ || !mid_cycle, checkpoint.string(),
             " was written under another config (config_hash ", state.at("config_hash").get<std::string>(), " vs ",
             config_hash_, ") in the middle of a generation cycle");
  inputCheck(micro_step_ <= cfg_.train.max_steps * cfg_.train.gradient_accumulation_steps, checkpoint.string(),
             " is at step ", optimizer_step_, ", beyond train.max_steps = ", cfg_.train.max_steps);
  {
    CausalLM loaded = load_hf_model(checkpoint, policy_->dtype(), device_);
    torch::NoGradGuard no_grad;
    auto dst = policy_->parameters();
    auto src = loaded->parameters();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
  }
  torch::load(*optimizer_, (checkpoint / "optimizer.pt").string());
  if (cfg_.grpo.sync_ref_model && fs::exists(checkpoint / "reference.pt")) {
    std::vector<torch::Tensor> saved;
    torch::load(saved, (checkpoint / "reference.pt").string());
    torch::NoGradGuard no_grad;
    auto dst = reference_->parameters();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(saved[i]);
  }
  if (mid_accumulation) {
    std::vector<torch::Tensor> grads;
    torch::load(grads, (checkpoint / str("grads-rank-", runtime_.rank(), ".pt")).string());
    auto params = policy_->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
    const fs::path rank_file = checkpoint / str("rank-", runtime_.rank(), ".json");
    const nlohmann::json rank_state = nlohmann::json::parse(read_text_file(rank_file));
    step_loss_float32_ = rank_state.value("step_loss_float32", 0.0f);
  }
  last_saved_micro_step_ = micro_step_;
  log_info(str("resumed from ", checkpoint.string(), " at step ", optimizer_step_, " (micro-step ", micro_step_, ")"));
}

}  // namespace

int run_training(Runtime& runtime, const TrainOptions& options) {
  Trainer trainer(runtime, options);
  return trainer.run();
}

}  // namespace rayless
