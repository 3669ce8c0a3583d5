// The GRPO training loop, top to bottom in Trainer::run. Generation lives in trainer_generation.cpp,
// checkpoints in trainer_checkpoint.cpp.
#include "rayless/trainer/trainer.h"

#include <cmath>
#include <csignal>
#include <optional>

#include "rayless/agent/tool_chat.h"
#include "rayless/agent/tool_workers.h"
#include "rayless/ops/kernel_plan.h"
#include "rayless/base/cpu_features.h"
#include "rayless/base/failure_message.h"
#include "rayless/base/files.h"
#include "rayless/base/log.h"
#include "rayless/comm/communicator.h"
#include "rayless/grpo/entropy_mask.h"
#include "rayless/grpo/entropy_threshold.h"
#include "rayless/base/hash.h"
#include "rayless/hf/model_directory.h"
#include "rayless/model/lora.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/rewards/rewards.h"
#include "rayless/prompts/prompt_builder.h"
#include "rayless/rollout/replay.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/runtime/available_memory.h"
#include "rayless/runtime/op_profile.h"
#include "rayless/runtime/runtime.h"
#include "rayless/runtime/signals.h"
#include "rayless/runtime/watchdog.h"
#include "rayless/trainer/checkpoint.h"
#include "rayless/trainer/data_parallel.h"
#include "rayless/trainer/optimizer.h"
#include "rayless/trainer/resource_bounds.h"
#include "rayless/trainer/run_directory.h"
#include "rayless/trainer/step_metrics.h"
#include "rayless/trainer/step_read.h"
#include "rayless/trainer/tensorboard.h"
#include "trainer/trainer_internal.h"

namespace fs = std::filesystem;

namespace rayless {

using namespace trainer_detail;

namespace {
const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGUSR1: return "SIGUSR1";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}
}  // namespace

Trainer::Trainer(Runtime& runtime, const TrainOptions& options, TrainerHooks hooks)
    : runtime_(runtime), options_(options), hooks_(std::move(hooks)) {
  cfg_ = options.config_path.empty() ? config_from_overrides(options.overrides)
                                     : load_config(options.config_path, options.overrides);
  check_batch_geometry(cfg_, runtime_.size());
  // the ranks that train; with generation ranks the batch geometry counts only these
  const int64_t training_ranks = cfg_.training_ranks(runtime_.size());
  output_dir_ = options.output_dir.empty() ? fs::path(cfg_.train.output_dir) : fs::path(options.output_dir);
  const int threads = runtime_.configure(cfg_.distributed);
  device_ = runtime_.select_device(cfg_.model.device);
  // the config can refuse float16 with device "cpu"; with "auto" only the device found tells
  inputCheck(!(cfg_.model.dtype == ModelDtype::Float16 && device_.is_cpu()),
             "model.dtype = \"float16\" is for GPUs only, and this run's device is the CPU (model.device = \"",
             choice_name(cfg_.model.device), "\" found no CUDA device): use \"bfloat16\" or \"float32\"");
  // bounds before memory: the positions the model is made for, and a lower bound of what this rank
  // will hold against what it has, before anything is loaded or written
  const ModelArchConfig arch = load_model_config(cfg_.model.path);
  // a completion that leaves no position for a prompt is refused now; the prompts are measured below
  (void)check_configured_positions(cfg_, arch, cfg_.model.path);
  check_memory_fits(training_memory(cfg_, arch, training_ranks), available_memory(device_, runtime_.local_size()),
                    "each rank of this run",
                    "lower generation.max_completion_length, data.max_prompt_length, generation.slots or "
                    "train.per_device_train_batch_size, or run fewer ranks per node (docs/models.md, Lengths and memory)");
  world_comm_ = make_communicator(runtime_, cfg_.distributed.backend, device_);
  world_ = comm_ = world_comm_.get();
  if (cfg_.distributed.generation_ranks > 0) {
    // asynchronous GRPO: the last generation_ranks ranks generate, the others train (async_plan.h)
    const int64_t rows_per_rank =
        cfg_.train.per_device_train_batch_size * cfg_.effective_steps_per_generation(training_ranks);
    plan_ = std::make_unique<AsyncPlan>(runtime_.size(), cfg_.distributed.generation_ranks, rows_per_rank,
                                        cfg_.grpo.num_generations, cfg_.grpo.async_lag, cfg_.grpo.weight_sync_steps);
    generates_ = plan_->generates(runtime_.rank());
    role_comm_ = world_->split(generates_ ? 1 : 0, runtime_.rank());
    weights_comm_ = world_->split(generates_ || runtime_.rank() == 0 ? 0 : -1, runtime_.rank());
    if (!generates_) comm_ = role_comm_.get();
  }
  guard_ = NonfiniteGuard(device_);
  torch::manual_seed(cfg_.train.seed);
  // how bfloat16 products run on the CPU (train.bf16_products), for every pass of this run
  ops::set_bfloat16_products(cfg_.train.bf16 && device_.is_cpu() ? ops::bfloat16_products_for(cfg_.train.bf16_products)
                                                                 : ops::BFloat16Products::bfloat16);

  steps_per_generation_ = cfg_.effective_steps_per_generation(training_ranks);
  micro_steps_per_cycle_ = steps_per_generation_ * cfg_.grpo.num_iterations;
  loss_settings_ = loss_settings_from_config(cfg_, training_ranks);
  config_hash_ = config_hash(cfg_);

  if (!cfg_.train.replay_rollouts.empty()) replay_ = std::make_unique<ReplaySource>(cfg_.train.replay_rollouts);
  // TRL corrects completions another engine sampled (vLLM there): generation ranks, or a replay file
  // with the sampler's log-probs; the ratio needs the trainer's old log-probs, so they are computed
  corrects_sampling_ = cfg_.grpo.vllm_importance_sampling_correction && (plan_ || (replay_ && replay_->has_logprobs()));
  needs_old_logps_ = cfg_.train.gradient_accumulation_steps % micro_steps_per_cycle_ != 0 || corrects_sampling_;
  tokenizer_ = load_tokenizer(cfg_.tokenizer.path, cfg_.model.path);
  prompt_format_ = prompt_format_from_config(cfg_.tokenizer, cfg_.model.path);
  // reward models run on the rank's device in the policy's dtype
  rewards_ = std::make_unique<RewardSet>(cfg_, runtime_.rank(), device_, torch_dtype_of(cfg_.model.dtype));
  start_agent();  // tool and environment workers; their tools join the prompts (before the lengths are checked)
  // every row checked now (prompt length after the template, what the rewards need), not hours in;
  // the rows stay in their files, read through an index when they are drawn
  const auto data_start = Clock::now();
  int64_t longest_prompt = 0;
  dataset_ = open_checked_dataset(cfg_.data.path, "data.path", dataset_checked_now_, longest_prompt);
  if (!cfg_.eval.path.empty()) {
    bool eval_checked_now = false;
    int64_t longest_eval_prompt = 0;
    eval_dataset_ = open_checked_dataset(cfg_.eval.path, "eval.path", eval_checked_now, longest_eval_prompt);
    longest_prompt = std::max(longest_prompt, longest_eval_prompt);
    if (cfg_.eval.max_samples > 0) eval_dataset_.limit(cfg_.eval.max_samples);
  }
  if (tool_chat_)  // TRL runs tools only for conversational prompts (the files read once more, streaming)
    for (const PromptDataset* d : {&dataset_, &eval_dataset_})
      d->scan(0, d->lines(), [&](int64_t, const PromptRow& row, const std::string& where, const std::string& problem) {
        inputCheck(!problem.empty() || row.is_chat() || prompt_format_.chat_template.explicitly_chosen(), where,
                   ": tools and environments need conversational prompts (a \"", cfg_.data.messages_field,
                   "\" list, or set tokenizer.chat_template to wrap plain text as a user message)");
      });
  const double data_seconds = seconds_since(data_start);
  check_training_positions(cfg_, arch, cfg_.model.path, longest_prompt);  // the positions the model is made for
  shard_spec_.num_prompts = dataset_.size();
  shard_spec_.prompts_per_rank = cfg_.global_generation_batch(training_ranks) / cfg_.grpo.num_generations;
  shard_spec_.world_size = 1;  // every rank walks the whole batch of prompts and takes its completions
  shard_spec_.seed = static_cast<uint64_t>(cfg_.train.seed);
  shard_spec_.shuffle = cfg_.data.shuffle;

  const torch::Dtype dtype = torch_dtype_of(cfg_.model.dtype);
  logp_dtype_ = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const MemoryPhase loading("loading the model");
  policy_ = load_hf_model(cfg_.model.path, dtype, device_, static_cast<uint64_t>(cfg_.model.init_seed));
  policy_->set_gradient_checkpointing(cfg_.train.gradient_checkpointing);
  std::string lora_note;
  if (cfg_.lora.enabled) {
    // only the adapters train; the reference model (beta > 0) is this model with the adapters off
    const auto adapted = add_lora_adapters(policy_, lora_settings(), static_cast<uint64_t>(cfg_.train.seed));
    int64_t adapter_parameters = 0;
    for (const auto& p : trainable_parameters(*policy_)) adapter_parameters += p.numel();
    lora_note = str(", LoRA r=", cfg_.lora.r, " on ", adapted.size(), " layers (", adapter_parameters, " trainable)");
  }
  // a generation rank samples only: no reference model, gradients or optimizer state
  if (cfg_.grpo.beta > 0 && !cfg_.lora.enabled && !generates_) {
    reference_ = load_hf_model(cfg_.model.path, dtype, device_, static_cast<uint64_t>(cfg_.model.init_seed));
    for (auto& p : reference_->parameters()) p.set_requires_grad(false);
    reference_->eval();
  }
  // what trains: every parameter, or with LoRA the adapters alone (their gradients, state, reductions)
  const std::vector<torch::Tensor> trainable = trainable_parameters(*policy_);
  if (!generates_) {
    data_parallel_ = std::make_unique<DataParallel>(*comm_, trainable, cfg_.distributed.bucket_size_mb, policy_->buffers());
    optimizer_ = make_optimizer(static_cast<int>(cfg_.distributed.zero_stage), *comm_, trainable, *data_parallel_,
                                cfg_.optim, cfg_.train.max_steps, cfg_.distributed.bucket_size_mb);
  }

  const std::string placement = runtime_.placement();  // collective: every rank, before rank 0 logs
  if (plan_) log_info(str("asynchronous GRPO: ", plan_->describe()));
  log_info(str("rayless train: ", runtime_.size(), " rank(s) x ", threads, " thread(s) on ", placement, ", device ", device_.str(),
               ", model ", cfg_.model.path, " (", policy_->config().num_parameters(), " parameters", lora_note, "), ",
               dataset_.size(), " prompts (", dataset_checked_now_ ? "read and checked" : "opened", " in ",
               seconds_text(data_seconds), " s; ", dataset_.index_note(),
               dataset_checked_now_ ? "" : "; rows checked by an earlier start with these files and settings",
               "), tokenizer ",
               tokenizer_->class_origin().empty() ? tokenizer_->kind() : tokenizer_->class_origin(), ", chat template ",
               prompt_format_.chat_template.source(), ", output ", output_dir_.string()));
  if (const std::string note = tokenizer_->class_change_note(); !note.empty()) log_warn(note);
  // which kernel each op runs on this machine, as `rayless version` prints it (docs/kernels.md)
  std::string kernels = "kernel plan:";
  for (const std::string& entry : ops::kernel_plan().describe()) kernels += "\n  " + entry;
  log_info(kernels);
  if (dataset_.skipped_lines() > 0)
    log_warn(str("skipped ", dataset_.skipped_lines(), " invalid lines of ", dataset_.path(), " (first: ",
                 dataset_.first_skip_reason(), ")"));
  if (cfg_.train.bf16 && device_.is_cpu() && !cpu_has_bfloat16_units()) {
    if (ops::bfloat16_products() == ops::BFloat16Products::bfloat16)
      log_warn("train.bf16 = true with train.bf16_products = \"bfloat16\" on a CPU without bfloat16 matrix units "
               "(AVX512-BF16 or AMX): its bfloat16 products are emulated in float32, many times slower (a training "
               "pass 19x slower than in float32 on an AMD EPYC with AVX2); train.bf16_products = \"float32\" "
               "(the default) runs them at the float32 rate");
    else
      log_info("train.bf16 on a CPU without bfloat16 matrix units (AVX512-BF16 or AMX): bfloat16 products run as "
               "float32 ones on the bfloat16 values, rounded once (train.bf16_products = float32)");
  }
}

Trainer::~Trainer() = default;

LoraSettings Trainer::lora_settings() const {
  LoraSettings s;
  s.r = cfg_.lora.r;
  s.alpha = cfg_.lora.alpha;
  s.dropout = cfg_.lora.dropout;
  s.target_modules = cfg_.lora.target_modules;
  s.use_rslora = cfg_.lora.use_rslora;
  return s;
}

// ---------------------------------------------------------------------------------------------------
// The loop.
int Trainer::run() {
  // SIGUSR1/SIGTERM/SIGINT become a checkpoint request while the loop runs (checkpoint.save_on_signal);
  // one that came while the trainer was made (rayless train holds them from its start) is acted on
  // at the first micro-step boundary
  std::optional<StopSignalScope> stop_signals;
  if (cfg_.checkpoint.save_on_signal) stop_signals.emplace();
  else release_stop_signals();
  // a new run never mixes with an old one: resume it, move it aside (--overwrite), or stop (exit 2)
  const std::optional<fs::path> resume_from =
      prepare_run_directory(*world_, output_dir_, options_.resume, options_.overwrite);
  if (runtime_.rank() != 0) {
    fs::create_directories(output_dir_ / "logs");
    open_rank_log_file((output_dir_ / "logs" / str("rank-", runtime_.rank(), ".log")).string());
  }
  // heartbeats beside the run: a stalled collective can then name the rank that never came (with
  // generation ranks, call counts compare within a role: the roles run different collectives)
  Watchdog::instance().set_heartbeat_dir((output_dir_ / "logs" / "heartbeat").string(), world_->size());
  if (plan_) {
    std::vector<int> roles(static_cast<size_t>(world_->size()));
    for (int r = 0; r < world_->size(); ++r) roles[static_cast<size_t>(r)] = plan_->generates(r) ? 1 : 0;
    Watchdog::instance().set_rank_groups(roles);
  }
  if (resume_from) restore(*resume_from);
  if (generates_) return generate_for_trainers();  // the generation ranks' loop (trainer_async.cpp)
  data_parallel_->broadcast_parameters(0);  // identical replicas from the start (or from the checkpoint)
  if (runtime_.rank() == 0) {
    // the run's first config; a resumed segment's is recorded with its first step (config_history.h)
    if (!resume_from) write_text_atomically(output_dir_ / "config.resolved.toml", config_to_toml(cfg_));
    metrics_log_ = std::make_unique<MetricsLog>(output_dir_ / "metrics.jsonl", resume_from ? optimizer_step_ : -1);
    if (cfg_.log.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(output_dir_ / "tensorboard");
  }

  const int64_t total_micro_steps = last_micro_step();
  run_start_ = step_start_ = Clock::now();
  first_step_ = optimizer_step_;
  Generation generation;
  bool have_generation = false;
  std::vector<MicroStep> micro_metrics;
  std::vector<StepMetrics> generation_metrics;
  std::unique_ptr<OpProfile> profile;  // --profile-step N: step N, from its first micro-step to its log line
  bool profiled = false;
  while (micro_step_ < total_micro_steps) {
    set_watchdog_step(optimizer_step_);
    if (options_.profile_step == optimizer_step_ + 1 && micro_metrics.empty() && !profile && !profiled) {
      profile = start_profile();
      profiled = !profile;  // a LibTorch without its profiler: said once, the run goes on
    }
    const int64_t generation_step = this->generation_step();
    const int64_t position_in_cycle = this->position_in_cycle();

    // 1. A new generation at the start of each cycle; after a resume mid-cycle, the stored one. With
    //    generation ranks, the cycle starts where both roles meet (stop? checkpoint? new weights?), and
    //    the generation comes from them.
    if (!have_generation || generation.rows.generation_step != generation_step) {
      if (plan_ && position_in_cycle == 0 && meet(false).stop) return kExitCheckpointedOnSignal;
      const MemoryPhase phase(str("generation ", generation_step, " (sampling, rewards, log-probs)"),
                              memory_bounds(cfg_, policy_->config(), runtime_.size(), MemoryUse::Sampling));
      const auto start = Clock::now();
      generation = position_in_cycle != 0 ? reload_generation(generation_step)
                   : plan_               ? receive_generation(generation_step)
                                         : generate_and_score(generation_step);
      generation_seconds_ += seconds_since(start);
      if (!generation.metrics.empty()) generation_metrics.push_back(generation.metrics);
      have_generation = true;
    }

    // 2. One micro-step: log-probs, loss, backward (gradients accumulate locally).
    const MemoryPhase training(str("training micro-step ", micro_step_ + 1),
                               memory_bounds(cfg_, policy_->config(), runtime_.size(), MemoryUse::TrainingStep));
    const auto start = Clock::now();
    micro_metrics.push_back(train_micro_batch(generation, position_in_cycle % steps_per_generation_));
    ++micro_step_;
    train_seconds_ += seconds_since(start);

    // 3. Every gradient_accumulation_steps micro-steps: allreduce, clip, AdamW, log, sync, checkpoint.
    if (at_optimizer_boundary()) {
      const MemoryPhase stepping(str("optimizer step ", optimizer_step_ + 1, " (AdamW, evaluation, checkpoint)"));
      StepMetrics m = finish_optimizer_step(micro_metrics, generation_metrics);
      if (eval_due())
        for (const auto& [k, v] : evaluate()) m[k] = v;
      if (runtime_.rank() == 0) {
        if (resume_from && optimizer_step_ == first_step_ + 1) record_segment_config(*resume_from);
        metrics_log_->write(optimizer_step_, m);
        if (tensorboard_) tensorboard_->add_scalars(optimizer_step_, m);
      }
      if (profile) {
        write_profile(*profile);
        profile.reset();
        profiled = true;
      }
      // every rank counted the same steps: they stop together, the last checkpoint as it was
      if (nonfinite_in_a_row_ >= cfg_.train.max_nonfinite_steps)
        throw NonfiniteError(str(nonfinite_in_a_row_, " non-finite steps in a row (steps ", optimizer_step_ - nonfinite_in_a_row_ + 1,
                                 "-", optimizer_step_, "; train.max_nonfinite_steps = ", cfg_.train.max_nonfinite_steps,
                                 "): stopped without applying them; the last checkpoint, ",
                                 last_checkpoint_.empty() ? std::string("none yet") : last_checkpoint_,
                                 ", is whole and finite (lower optim.learning_rate, check the rewards and the data; "
                                 "docs/reliability.md, Non-finite steps)"));
      sync_reference_model();
      if (checkpoint_due()) save(true);
    }
    if (hooks_.after_micro_step) hooks_.after_micro_step(micro_step_);

    // 4. A signal on any rank: all ranks agree here, checkpoint, and stop (with generation ranks: at
    //    the next meeting).
    if (micro_step_ < total_micro_steps && stop_for_signal()) return kExitCheckpointedOnSignal;
  }
  finish_run();
  if (options_.profile_step > 0 && !profiled)
    log_warn(str("--profile-step ", options_.profile_step, ": this run worked on steps ", first_step_ + 1, " to ",
                 optimizer_step_, ", not on that one: nothing profiled"));
  std::string gpu_memory;
  if (const auto gpu = device_memory_peaks(device_))
    gpu_memory = str("; peak GPU memory (this rank's caching allocator) ", gpu->allocated_bytes / (1024 * 1024),
                     " MiB allocated, ", gpu->reserved_bytes / (1024 * 1024), " MiB reserved");
  log_info(str("rayless train: done, ", optimizer_step_, " steps; checkpoint in ",
               (output_dir_ / "checkpoints" / "latest").string(), gpu_memory));
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------------
// One micro-batch: forward with grad, entropy mask (global threshold), loss, backward.
Trainer::MicroStep Trainer::train_micro_batch(const Generation& generation, int64_t micro_index) {
  const RolloutBatch& batch = generation.rows;
  const int64_t B = cfg_.train.per_device_train_batch_size;
  const torch::Tensor rows = generation.order.slice(0, micro_index * B, (micro_index + 1) * B).contiguous();
  const int64_t* row_index = rows.data_ptr<int64_t>();  // a host tensor: the order is drawn on the CPU
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < rows.size(0); ++i) prompts.push_back(batch.prompt_ids[static_cast<size_t>(row_index[i])]);
  const torch::Tensor completion_ids = batch.completion_ids.index_select(0, rows);
  const torch::Tensor completion_mask = batch.completion_mask.index_select(0, rows).to(device_);
  // LoRA dropout draws from the default generator: seed it from (seed, rank, micro-step) so a resumed
  // run draws the same masks
  if (cfg_.lora.enabled && cfg_.lora.dropout > 0) {
    const std::string stream = str(cfg_.train.seed, "/", comm_->rank(), "/", micro_step_, "/lora_dropout");
    torch::manual_seed(fnv1a64(stream.data(), stream.size()));
  }
  ops::LogprobsAndEntropies current = policy_logprobs(policy_, prompts, completion_ids, completion_mask, batch.prompt_width());
  LossInputs in;
  in.per_token_logps = current.logps.to(logp_dtype_);
  if (batch.old_logps.defined()) in.old_per_token_logps = batch.old_logps.index_select(0, rows).to(device_);
  if (batch.ref_logps.defined()) in.ref_per_token_logps = batch.ref_logps.index_select(0, rows).to(device_);
  if (batch.sampling_logps.defined()) in.sampling_per_token_logps = batch.sampling_logps.index_select(0, rows).to(device_);
  if (batch.importance_sampling_ratio.defined())
    in.importance_sampling_ratio = batch.importance_sampling_ratio.index_select(0, rows).to(device_);
  in.advantages = batch.advantages.index_select(0, rows).to(device_);
  // the loss and the ratio count the model's own tokens only (TRL: completion_mask x tool_mask)
  in.completion_mask = batch.tool_mask.defined() ? completion_mask * batch.tool_mask.index_select(0, rows).to(device_)
                                                 : completion_mask;
  in.entropies = current.entropies.detach().to(logp_dtype_);
  in.num_items_in_batch = static_cast<double>(batch.num_items_in_batch);
  StepMetrics threshold;
  if (cfg_.grpo.top_entropy_quantile < 1.0)
    in.entropy_mask = entropy_mask_of(in.entropies, in.completion_mask, batch.generation_step, threshold);
  const LossOutput out = compute_loss(in, loss_settings_);
  const torch::Tensor loss = hooks_.loss ? hooks_.loss(out.loss, micro_step_) : out.loss;
  loss.backward();
  optimizer_->after_backward();  // ZeRO-2: this rank keeps only its shard of the averaged gradient
  // TRL's logged loss is transformers' running total: a float32 tensor that each micro-step's loss
  // is added to, averaged over ranks when the step is logged
  // (added in float64 and rounded once, as a float32 total plus a double loss is)
  const torch::Tensor total = step_loss_.defined() ? step_loss_.to(torch::kFloat64) : torch::zeros({}, torch::kFloat64);
  step_loss_ = (total.to(loss.device()) + loss.detach().to(torch::kFloat64)).to(torch::kFloat32);
  MicroStep micro{reduce_loss_metrics(*comm_, out), threshold};
  // the guard: this micro-step's parts, checked where they are (no host sync), agreed at the step
  guard_.raise(NonfiniteGuard::kLogits, generation.logits_nonfinite);
  guard_.raise(NonfiniteGuard::kRewards, generation.rewards_nonfinite);
  guard_.check(NonfiniteGuard::kLoss, loss);
  // a NaN count-0 mean is "no value"; a NaN or infinite sum is not
  guard_.check(NonfiniteGuard::kLossMetrics, micro.loss.sums);
  const torch::Tensor bad_logps = (torch::isfinite(in.per_token_logps.detach()).logical_not() & (completion_mask != 0)).any(1);
  guard_.check(NonfiniteGuard::kLogprobs, in.per_token_logps.detach().masked_fill(completion_mask == 0, 0.0));
  std::vector<int64_t> dataset_rows;
  for (int64_t i = 0; i < rows.size(0); ++i)
    dataset_rows.push_back(batch.group_index.empty() ? -1 : batch.group_index[static_cast<size_t>(row_index[i])]);
  const torch::Tensor generation_bad = generation.nonfinite_rows.defined() ? generation.nonfinite_rows.index_select(0, rows)
                                                                           : torch::zeros({rows.size(0)}, torch::kBool);
  guard_.note_rows(bad_logps | generation_bad.to(bad_logps.device()), dataset_rows,
                   generation.rewards_per_func.defined() ? generation.rewards_per_func.index_select(0, rows) : torch::Tensor());
  return micro;
}

// The high-entropy mask: the threshold is a quantile over the active tokens of all ranks, taken in
// float32 as TRL does. The store records the threshold of each generation's first micro-batch.
torch::Tensor Trainer::entropy_mask_of(const torch::Tensor& entropies, const torch::Tensor& mask,
                                       int64_t generation_step, StepMetrics& metrics) {
  const torch::Tensor active = entropies.masked_select(mask.to(torch::kBool)).to(torch::kFloat32).contiguous().cpu();
  const float threshold =
      global_entropy_threshold(*comm_, active, cfg_.grpo.top_entropy_quantile, cfg_.grpo.entropy_threshold_method).value;
  metrics["entropy_threshold"] = threshold;
  if (position_in_cycle() == 0)
    set_rollout_attribute((output_dir_ / "rollouts").string(), generation_step, comm_->rank(), "entropy_threshold",
                          threshold);
  return entropy_mask(entropies, mask, threshold);
}

// Gradients averaged over ranks, the optimizer step, and the step's metrics (rank 0 logs them).
StepMetrics Trainer::finish_optimizer_step(std::vector<MicroStep>& micro, std::vector<StepMetrics>& generations) {
  double gradient_sync_seconds = optimizer_->take_gradient_sync_seconds();  // ZeRO-2's, after each backward
  const auto start = Clock::now();
  // gradients averaged across ranks and their squared norm, where they are
  const torch::Tensor grad_squares = optimizer_->reduce_gradients();
  // the loss summed over the step's micro-steps in float32, its float32 mean over ranks (transformers')
  const torch::Tensor step_loss = (step_loss_.defined() ? step_loss_ : torch::zeros({}, torch::kFloat32)).reshape({1});
  const torch::Tensor loss_mean = comm_->allgather(comm_->in_collective_memory(step_loss)).mean();
  step_loss_ = torch::Tensor();
  // the step's one read to the host: the guard's flags (agreed over ranks), the norm, the loss and
  // every micro-step's loss metrics
  std::vector<ReducedLossMetrics> reduced;
  for (const MicroStep& one : micro) reduced.push_back(one.loss);
  StepRead read;
  const int64_t flags_at = read.add(guard_.reduce_flags(*comm_));
  const int64_t norm_at = read.add(grad_squares);
  const int64_t loss_at = read.add(loss_mean);
  const int64_t metrics_at = add_loss_metrics(read, reduced);
  const std::vector<double> values = read.values();

  // the guard's verdict, the same on every rank, before anything is updated; then clip and AdamW at
  // the schedule's count of applied steps; nothing applied for a non-finite step (nor for a
  // non-finite grad norm, which every rank sees alike)
  std::vector<std::string> nonfinite = NonfiniteGuard::raised(values.data() + flags_at);
  const double grad_norm = std::sqrt(values[static_cast<size_t>(norm_at)]);
  optimizer_->apply_gradients(optimizer_step_ - nonfinite_steps_, grad_norm, nonfinite.empty());
  if (!std::isfinite(grad_norm)) nonfinite.push_back("grad_norm");
  const double step_seconds = seconds_since(start);
  const double sync_in_step = optimizer_->take_gradient_sync_seconds();
  gradient_sync_seconds += sync_in_step;
  optimizer_seconds_ += step_seconds - sync_in_step;
  train_seconds_ += step_seconds;
  ++optimizer_step_;

  std::vector<StepMetrics> per_micro =
      metrics_at < 0 ? std::vector<StepMetrics>(micro.size()) : loss_metrics_from(reduced, values.data() + metrics_at);
  for (size_t i = 0; i < micro.size(); ++i)
    for (const auto& [k, v] : micro[i].host) per_micro[i][k] = v;
  StepMetrics m = mean_over(per_micro);
  for (const auto& [k, v] : mean_over(generations)) m[k] = v;
  if (!generations.empty()) m["num_tokens"] = static_cast<double>(num_tokens_);  // a running total, as TRL
  micro.clear();
  generations.clear();
  m["loss"] = values[static_cast<size_t>(loss_at)];
  m["grad_norm"] = grad_norm;
  m["learning_rate"] = optimizer_->learning_rate();
  m["old_logprob_passes"] = static_cast<double>(old_logprob_passes_);  // μ = 1 skips this pass
  const double step_time = seconds_since(step_start_);
  step_start_ = Clock::now();
  m["step_time"] = step_time;
  m["time/generation"] = generation_seconds_;
  m["time/sampling"] = sampling_seconds_;
  m["time/train"] = train_seconds_;
  m["time/gradient_allreduce"] = gradient_sync_seconds;  // ZeRO: its reduce-scatters
  m["time/optimizer"] = optimizer_seconds_;
  if (plan_) {
    // waiting for the other role since the last step (training ranks: their mean; generation ranks: the
    // mean of what they reported at the meetings), and the generation ranks' sampling and scoring
    m["async/trainer_idle"] = global_sum(*comm_, idle_seconds_) / comm_->size();
    m["async/generator_idle"] = generator_idle_seconds_;
    m["async/generator_busy"] = generator_busy_seconds_;
    idle_seconds_ = generator_idle_seconds_ = generator_busy_seconds_ = 0;
  }
  m["tokens_per_second"] = m.count("completions/total_tokens") ? m["completions/total_tokens"] / std::max(step_time, 1e-9) : NAN;
  m["memory/peak_rss_mb"] = global_max(*comm_, static_cast<double>(peak_rss_bytes()) / (1024.0 * 1024.0));
  // every rank has the same kind of device, so all or none of them join these collectives
  if (const auto gpu = device_memory_peaks(device_)) {
    m["memory/gpu_peak_allocated_mb"] = global_max(*comm_, static_cast<double>(gpu->allocated_bytes) / (1024.0 * 1024.0));
    m["memory/gpu_peak_reserved_mb"] = global_max(*comm_, static_cast<double>(gpu->reserved_bytes) / (1024.0 * 1024.0));
  }
  // what the rank holds for training (the largest over ranks; exact tensor bytes)
  const OptimizerMemory held = optimizer_->memory();
  int64_t weight_bytes = 0;  // frozen base weights too
  for (const auto& p : policy_->parameters()) weight_bytes += p.numel() * p.element_size();
  m["memory/parameters_mb"] = global_max(*comm_, static_cast<double>(weight_bytes) / (1024.0 * 1024.0));
  m["memory/gradients_mb"] = global_max(*comm_, static_cast<double>(held.gradients) / (1024.0 * 1024.0));
  m["memory/optimizer_state_mb"] = global_max(*comm_, static_cast<double>(held.optimizer_state) / (1024.0 * 1024.0));
  if (nonfinite.empty()) {
    nonfinite_in_a_row_ = 0;
    guard_.clear_rows();
  } else {
    ++nonfinite_steps_;
    ++nonfinite_in_a_row_;
    report_nonfinite_step(nonfinite, grad_norm);
  }
  m["train/nonfinite_steps"] = static_cast<double>(nonfinite_steps_);  // a running total
  old_logprob_passes_ = 0;
  sampling_seconds_ = optimizer_seconds_ = generation_seconds_ = train_seconds_ = 0;
  if (runtime_.rank() == 0 && cfg_.log.console &&
      (optimizer_step_ % cfg_.log.logging_steps == 0 || optimizer_step_ == cfg_.train.max_steps)) {
    const double per_step = seconds_since(run_start_) / static_cast<double>(optimizer_step_ - first_step_);
    log_info(progress_line(optimizer_step_, cfg_.train.max_steps, m,
                           per_step * static_cast<double>(cfg_.train.max_steps - optimizer_step_)));
    print_samples();
  }
  return m;
}

// A step the guard left out, on every rank: one warning on rank 0 naming what was not finite and the
// rows that produced it (their prompt and reward columns), or the step's rows when none was marked.
void Trainer::report_nonfinite_step(const std::vector<std::string>& sources, double grad_norm) {
  constexpr int64_t kRowsNamed = 8;
  const torch::Tensor rows = guard_.gather_rows(*comm_, static_cast<int64_t>(rewards_->size()), kRowsNamed);
  if (runtime_.rank() != 0) return;
  std::string what;
  for (const std::string& source : sources) what += (what.empty() ? "" : ", ") + source;
  const bool marked = rows.size(0) > 0 && rows[0][1].item<double>() > 0;
  std::string named;
  for (int64_t i = 0; i < rows.size(0); ++i) {
    std::string rewards;
    for (size_t k = 0; k < rewards_->size(); ++k)
      rewards += str(k == 0 ? "" : ", ", rewards_->names()[k], " ", rows[i][2 + static_cast<int64_t>(k)].item<double>());
    named += str(i == 0 ? "" : "; ", prompt_name(static_cast<int64_t>(rows[i][0].item<double>())), " rewards [", rewards, "]");
  }
  log_warn(str("step ", optimizer_step_, " not applied: not finite: ", what, " (grad_norm ", std::isnan(grad_norm) ? "nan" : str(grad_norm),
               "); weights, AdamW state and learning-rate schedule unchanged (", nonfinite_in_a_row_, " in a row, ",
               nonfinite_steps_, " in all; train.max_nonfinite_steps = ", cfg_.train.max_nonfinite_steps, "); ",
               marked ? "rows that produced it: " : "no row marked; the step's rows: ", named.empty() ? "none" : named));
}

std::string Trainer::prompt_name(int64_t dataset_row) const {
  if (dataset_row < 0) return "a row";
  if (replay_ || dataset_row >= dataset_.size()) return str("group ", dataset_row);
  return str("prompt ", dataset_row, " (", dataset_.where(dataset_row), ")");
}

// Rank 0 keeps the first log.num_completions_to_print rows of each generation for the console.
void Trainer::keep_samples(const Drawn& drawn, const torch::Tensor& rewards_per_func, const torch::Tensor& advantages) {
  if (comm_->rank() != 0 || cfg_.log.num_completions_to_print <= 0) return;
  samples_.clear();
  const int64_t n = std::min<int64_t>(cfg_.log.num_completions_to_print, rewards_per_func.size(0));
  for (int64_t i = 0; i < n; ++i) {
    SampleRow row{drawn.prompt_texts[static_cast<size_t>(i)], drawn.completion_texts[static_cast<size_t>(i)], {},
                  advantages[i].item<double>()};
    for (int64_t k = 0; k < rewards_per_func.size(1); ++k) row.rewards.push_back(rewards_per_func[i][k].item<double>());
    samples_.push_back(std::move(row));
  }
}

// The samples of the newest generation, once (TRL's log_completions at a logging step).
void Trainer::print_samples() {
  if (samples_.empty()) return;
  std::string table = sample_table(optimizer_step_, samples_, rewards_->names(), terminal_width());
  table.pop_back();  // log_info ends the line
  log_info(table);
  samples_.clear();
}

// TRL's SyncRefModelCallback: ref = alpha * policy + (1 - alpha) * ref every ref_model_sync_steps.
// --profile-step: LibTorch's profiler from here on; none (and a warning) where this LibTorch has none.
std::unique_ptr<OpProfile> Trainer::start_profile() const {
  try {
    return std::make_unique<OpProfile>(device_);
  } catch (const std::exception& e) {
    log_warn(str("--profile-step ", options_.profile_step, ": LibTorch's profiler did not start (", failure_message(e),
                 "): the step runs unprofiled"));
    return nullptr;
  }
}

// The step's profile, one file per rank; rank 0 says where and gives its headline.
void Trainer::write_profile(OpProfile& running) {
  nlohmann::json profile = running.stop(1);
  profile["optimizer_step"] = optimizer_step_;
  profile["rank"] = runtime_.rank();
  const fs::path file = output_dir_ / "profile" / str("step-", optimizer_step_, "-rank-", runtime_.rank(), ".json");
  fs::create_directories(file.parent_path());
  // kernel names are whatever the libraries compiled in: replace any byte that is not UTF-8
  write_text_atomically(file, profile.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  if (runtime_.rank() == 0)
    log_info(str("step ", optimizer_step_, " ", profile_line(profile), " (every rank's in ", file.parent_path().string(), ")"));
}

void Trainer::sync_reference_model() {
  if (!cfg_.grpo.sync_ref_model || optimizer_step_ % cfg_.grpo.ref_model_sync_steps != 0) return;
  torch::NoGradGuard no_grad;
  auto ref_params = reference_->parameters();
  auto policy_params = policy_->parameters();
  const double alpha = cfg_.grpo.ref_model_mixup_alpha;
  for (size_t i = 0; i < ref_params.size(); ++i) ref_params[i].mul_(1.0 - alpha).add_(policy_params[i], alpha);
}

// A signal on any rank: every rank agrees through one collective, then checkpoints. With generation
// ranks the agreement waits for the next meeting, where they take part (trainer_async.cpp).
bool Trainer::stop_for_signal() {
  if (!cfg_.checkpoint.save_on_signal || plan_) return false;
  const int signal_number = static_cast<int>(global_max(*comm_, static_cast<double>(stop_signal_number())));
  if (signal_number == 0) return false;
  log_info(str("rayless train: ", signal_name(signal_number), " received: checkpointing at micro-step ", micro_step_,
               " (a second SIGTERM or SIGINT stops at once, without a checkpoint)"));
  save(at_optimizer_boundary());
  log_info(str("rayless train: stopped by signal after step ", optimizer_step_, " (micro-step ", micro_step_,
               "); resume with --resume auto"));
  return true;
}

int64_t Trainer::generation_step() const {
  return segment_.generation_step + (micro_step_ - segment_.micro_step) / micro_steps_per_cycle_;
}

int64_t Trainer::position_in_cycle() const { return (micro_step_ - segment_.micro_step) % micro_steps_per_cycle_; }

bool Trainer::at_optimizer_boundary() const {
  return (micro_step_ - segment_.micro_step) % cfg_.train.gradient_accumulation_steps == 0;
}

int64_t Trainer::last_micro_step() const {
  return segment_.micro_step + (cfg_.train.max_steps - segment_.optimizer_step) * cfg_.train.gradient_accumulation_steps;
}

ShardCursor Trainer::data_cursor(int64_t generation_step) const {
  return advance_cursor(shard_spec_, segment_.data_cursor, generation_step - segment_.generation_step);
}

int run_training(Runtime& runtime, const TrainOptions& options) {
  Trainer trainer(runtime, options);
  return trainer.run();
}

}  // namespace rayless
