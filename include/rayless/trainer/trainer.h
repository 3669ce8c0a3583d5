// `rayless train`: the GRPO loop of TRL's GRPOTrainer, SPMD over MPI ranks. Trainer::run reads as the
// loop itself; each step is one call into the module that owns it (prompts, sampler, rewards, grpo,
// rollout store, optimizer, step metrics, trainer state). The class is public so tests drive it,
// with hooks passed in.
//
// Counting follows TRL: a micro-step is one forward/backward over per_device_train_batch_size
// completions; an optimizer step takes gradient_accumulation_steps micro-steps; a generation gives each
// rank steps_per_generation micro-batches and is reused for num_iterations (μ) passes, so a new
// generation starts every steps_per_generation x μ micro-steps.
//
// With distributed.generation_ranks = K > 0 (asynchronous GRPO, async_plan.h) the last K ranks take
// the other role: Trainer::run hands them to generate_for_trainers (trainer_async.cpp), and the
// training ranks' loop gets each generation from them instead of sampling it. The counting above is
// the training ranks'; they and the generation ranks meet at the start of every generation cycle.
#pragma once
#include <torch/types.h>

#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rayless/agent/agent_rollout.h"
#include "rayless/base/config.h"
#include "rayless/ops/ops.h"
#include "rayless/grpo/loss.h"
#include "rayless/model/lora.h"
#include "rayless/model/model.h"
#include "rayless/prompts/dataset.h"
#include "rayless/prompts/prompt_builder.h"
#include "rayless/prompts/sharding.h"
#include "rayless/rollout/rollout_batch.h"
#include "rayless/trainer/async_plan.h"
#include "rayless/sampler/sampler.h"
#include "rayless/trainer/metrics.h"
#include "rayless/trainer/nonfinite_guard.h"
#include "rayless/trainer/sample_table.h"
#include "rayless/trainer/step_metrics.h"
#include "rayless/trainer/trainer_state.h"

namespace rayless {

class Communicator;
class OpProfile;
class DataParallel;
class MetricsLog;
class Optimizer;
class ReplaySource;
struct ReplayedGeneration;
class RewardSet;
class Runtime;
class TensorBoardWriter;
class Tokenizer;
class ToolChat;
class ToolWorkers;
struct AdvantageOutput;

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string output_dir;              // --output (empty = train.output_dir)
  std::string resume;                  // --resume auto|PATH (empty = fresh start)
  bool overwrite = false;              // --overwrite: move an old run in the directory aside
  std::vector<std::string> allow_config_changes;  // --allow-config-change KEY: may differ from the checkpoint's
  int64_t profile_step = 0;  // --profile-step N: optimizer step N under LibTorch's profiler (0: none)
};

// Called on every rank after each micro-step (micro_step = completed micro-steps), before the ranks
// agree on a stop: tests raise a signal here to checkpoint at an exact place. `loss` (tests only, no
// production switch) may replace a micro-step's loss before backward: the non-finite guard's test
// forces an infinity there.
struct TrainerHooks {
  std::function<void(int64_t micro_step)> after_micro_step;
  std::function<torch::Tensor(const torch::Tensor& loss, int64_t micro_step)> loss;
};

class Trainer {
 public:
  Trainer(Runtime& runtime, const TrainOptions& options, TrainerHooks hooks = {});
  ~Trainer();
  // Trains until train.max_steps or a stop signal: kExitOk when done, kExitCheckpointedOnSignal after
  // a signal checkpoint. Collective: every rank calls it.
  int run();

 private:
  // One generation on this rank: its rows, the order micro-batches take them in, and its metrics.
  struct Generation {
    RolloutBatch rows;
    torch::Tensor order;  // [N] micro-batch i = rows order[iB:(i+1)B] (TRL shuffles, then splits)
    StepMetrics metrics;  // empty when read back from the store
    // for the non-finite guard: this rank's rows whose logits or rewards were not finite ([N] bool),
    // whether any was, and the rows' reward columns [N, K] (undefined when read back from the store)
    torch::Tensor nonfinite_rows;
    bool logits_nonfinite = false, rewards_nonfinite = false;
    torch::Tensor rewards_per_func;
  };
  // Prompts and completions of one generation before scoring.
  struct Drawn {
    RolloutBatch rows;  // prompt_ids, group_index, completion ids/mask/lengths/truncated
    std::vector<std::string> prompt_texts;
    std::vector<nlohmann::json> fields;  // dataset rows (for rewards)
    std::vector<std::string> completion_texts;  // decoded by score()
    GenerationOutput sampled;            // the sampler's log-probs and entropies (undefined when replayed)
    bool sampled_elsewhere = false;      // by another engine (generation ranks, a replay file with log-probs)
    // runs with tools or an environment: each row's conversation (messages, turns) and call counts
    std::vector<AgentRollout> rollouts;
    std::vector<std::string> where;      // each row's source (dataset file:line or replay line), for messages
  };

  // generation (trainer_generation.cpp)
  Generation generate_and_score(int64_t generation_step);
  // what follows the draw, however the completions came: advantages, old/reference log-probs, the
  // importance-sampling correction, metrics, the store
  Generation finish_generation(Drawn drawn, const torch::Tensor& rewards_per_func);
  RowPiece own_rows() const;  // this training rank's slice of a generation
  Drawn draw_prompts(int64_t generation_step, const RowPiece& rows);
  Drawn draw_sampled(int64_t generation_step, const RowPiece& rows);
  Drawn draw_replayed(int64_t generation_step);
  Drawn draw_replayed_turns(Drawn drawn, const ReplayedGeneration& g, int64_t generation_step,
                            const std::vector<std::string>& where);
  void add_prompt(Drawn& drawn, const PromptRow& row, const std::string& where);
  void take_sampled(Drawn& drawn, int64_t step);
  RolloutAttrs store_attrs(int64_t num_generations) const;
  torch::Tensor score(Drawn& drawn);
  void old_and_reference_logps(RolloutBatch& rows, torch::Tensor& entropies);
  Generation reload_generation(int64_t generation_step);
  // fnv1a64 of this rank's stored file of a generation ("" when there is none)
  std::string generation_file_hash(int64_t generation_step) const;
  torch::Tensor micro_batch_order(int64_t generation_step, int64_t rows) const;
  ops::LogprobsAndEntropies policy_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                       const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                       int64_t prompt_width);

  // datasets (trainer_data.cpp): opened through their line indexes, every row checked over the ranks
  // or an earlier check's verdict reused (checked_now says which); longest_prompt: in tokens
  PromptDataset open_checked_dataset(const std::string& path, const std::string& key, bool& checked_now,
                                     int64_t& longest_prompt);
  std::string dataset_check_fingerprint() const;

  // tools and environments (trainer_agent.cpp)
  void start_agent();
  // reset(**row) of environment instance i for row i; the observation joins the row's last message
  void reset_environments(std::vector<PromptRow>& rows, const std::vector<std::string>& where);
  // the multi-turn tool loop after each row's first turn; the batch's completion tensors from its rollouts
  void roll_out_tools(Drawn& drawn, TurnOutput first, const GenerateTurn& generate, const std::vector<std::string>& where,
                      const KeptKV* kept = nullptr);
  // Later turns of conversations by the sampler; rows resume from the keys and values `kept` holds
  // for them (generate's store, filled by the first turn; null: each turn prefills again).
  GenerateTurn sampler_turns(const SamplingParams& params, const SamplingStream& stream, std::shared_ptr<KeptKV> kept);
  GenerateTurn replayed_turns(const std::vector<std::vector<std::vector<int64_t>>>& turns, std::vector<size_t>& next,
                              const std::string& where);
  StepMetrics tool_metrics(const Drawn& drawn) const;

  // evaluation (trainer_eval.cpp)
  bool eval_due() const;
  StepMetrics evaluate();

  // sample completions for the console (log.num_completions_to_print)
  void keep_samples(const Drawn& drawn, const torch::Tensor& rewards_per_func, const torch::Tensor& advantages);
  void print_samples();

  // training (trainer.cpp)
  // a micro-step's metrics: its loss metrics reduced over ranks but not read (read once per step),
  // and what the host already knows (the entropy threshold)
  struct MicroStep {
    ReducedLossMetrics loss;
    StepMetrics host;
  };
  MicroStep train_micro_batch(const Generation& generation, int64_t micro_index);
  torch::Tensor entropy_mask_of(const torch::Tensor& entropies, const torch::Tensor& mask, int64_t generation_step,
                                StepMetrics& metrics);
  StepMetrics finish_optimizer_step(std::vector<MicroStep>& micro, std::vector<StepMetrics>& generations);
  // a step the guard left out: counted, logged with the rows that produced it (collective)
  void report_nonfinite_step(const std::vector<std::string>& sources, double grad_norm);
  // "prompt 12 (data/x.jsonl:13)" for a row's prompt index (a replayed run: its group)
  std::string prompt_name(int64_t dataset_row) const;
  // a checkpoint never holds a NaN or an infinity: what this rank would write, checked (collective)
  void check_checkpoint_finite(bool at_optimizer_boundary);
  void sync_reference_model();
  bool stop_for_signal();

  LoraSettings lora_settings() const;  // lora.* of the config

  // asynchronous GRPO (trainer_async.cpp): the meeting at every cycle boundary, the generation ranks'
  // loop, the training ranks' side of the handover
  struct Meeting {
    bool stop = false;  // a stop signal on some rank, or training done: checkpointed, now end
    int signal = 0;     // the signal that stopped it (0: training done)
  };
  Meeting meet(bool training_done);
  int generate_for_trainers();
  void generate_share(int64_t generation_step);
  Rollouts hand_over(const Rollouts& share);
  Generation receive_generation(int64_t generation_step);
  Drawn draw_received(int64_t generation_step, const Rollouts& mine);
  void restore_generation_rank(const std::filesystem::path& checkpoint, const TrainerState& state);
  int64_t last_generation_step() const;  // the generation the last micro-step of the run trains on

  // checkpoints (trainer_checkpoint.cpp)
  void save(bool at_optimizer_boundary);
  std::unique_ptr<OpProfile> start_profile() const;  // --profile-step: the profiler, or none where it cannot start
  void write_profile(OpProfile& running);             // and its summary, profile/step-N-rank-R.json
  void finish_run();   // the last checkpoint (with generation ranks: at a last meeting, which ends their loop)
  bool checkpoint_due() const;  // the periodic checkpoint after this optimizer step
  void restore(const std::filesystem::path& checkpoint);
  void load_policy_weights(const std::filesystem::path& checkpoint);
  void check_config_against(const std::filesystem::path& checkpoint, const TrainerState& state, bool mid_cycle) const;
  void record_segment_config(const std::filesystem::path& resumed_from) const;

  // Where the run stands, counted from the start of this segment (segment_): a resume at a cycle
  // and optimizer-step boundary may change the batch geometry, so counts restart there.
  int64_t generation_step() const;     // the generation in progress (or next, at a cycle boundary)
  int64_t position_in_cycle() const;   // micro-steps done in it
  bool at_optimizer_boundary() const;  // no gradients accumulated
  int64_t last_micro_step() const;     // the micro-step at which train.max_steps is reached
  ShardCursor data_cursor(int64_t generation_step) const;  // where that generation draws its prompts

  Runtime& runtime_;
  TrainOptions options_;
  TrainerHooks hooks_;
  Config cfg_;
  std::filesystem::path output_dir_;
  torch::Device device_ = torch::kCPU;
  // communicators: world_ every rank (run directory, checkpoints, meetings); comm_ the training ranks
  // (gradients, metrics; = world_ without generation ranks); role_comm_ owns this rank's role's;
  // weights_comm_ training rank 0 and the generation ranks (weight pushes)
  std::unique_ptr<Communicator> world_comm_, role_comm_, weights_comm_;
  Communicator* world_ = nullptr;
  Communicator* comm_ = nullptr;
  std::unique_ptr<AsyncPlan> plan_;  // null when every rank trains and generates
  bool generates_ = false;           // this rank is a generation rank
  std::shared_ptr<Tokenizer> tokenizer_;
  CausalLM policy_{nullptr};
  CausalLM reference_{nullptr};
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<DataParallel> data_parallel_;
  PromptFormat prompt_format_;  // tokenizer.chat_template resolved once (a bad template fails at start)
  PromptDataset dataset_;
  std::unique_ptr<RewardSet> rewards_;
  std::unique_ptr<ReplaySource> replay_;  // train.replay_rollouts: completions from a file, not sampled
  std::unique_ptr<ToolWorkers> tool_workers_;  // [tools.NAME] and [environment] workers (agentic runs)
  std::unique_ptr<ToolChat> tool_chat_;        // the chat template's tool calls and results
  std::unique_ptr<MetricsLog> metrics_log_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0, log.tensorboard
  PromptDataset eval_dataset_;                      // eval.path (empty: no evaluation)
  bool dataset_checked_now_ = false;                // data.path's rows checked by this start (not reused)
  std::vector<SampleRow> samples_;                  // rank 0: the latest generation's first rows
  ShardSpec shard_spec_;  // the whole generation batch of prompts; each rank takes its completions
  std::string config_hash_;
  LossSettings loss_settings_;
  NonfiniteGuard guard_;

  // progress (what a checkpoint stores)
  int64_t optimizer_step_ = 0;           // completed optimizer steps
  int64_t micro_step_ = 0;               // completed micro-steps
  int64_t num_tokens_ = 0;               // prompt + completion tokens seen, all ranks (TRL's num_tokens)
  // this rank's loss summed over the step's micro-steps in float32 (transformers'), a scalar on the
  // rank's device, read once per step
  torch::Tensor step_loss_;
  std::string expected_generation_hash_;  // set by a mid-cycle restore: the stored generation's file hash
  int64_t last_saved_micro_step_ = -1;
  int64_t nonfinite_steps_ = 0;           // optimizer steps the guard left out (train/nonfinite_steps)
  int64_t nonfinite_in_a_row_ = 0;        // of them, in a row up to now
  std::string last_checkpoint_;           // the newest whole checkpoint ("" = none yet)
  SegmentStart segment_;                  // where this segment of the run began (zeros for a fresh run)

  // asynchronous GRPO
  int64_t generators_version_ = -1;  // the policy version the generation ranks hold (every rank tracks it)
  int64_t last_saved_step_ = 0;      // optimizer step of the last checkpoint (periodic checkpoints at meetings)
  std::deque<Rollouts> in_flight_;   // generation ranks: shares sampled and stored, not yet handed over
  double idle_seconds_ = 0;          // waiting for the other role (at meetings and handovers) since the last report
  double busy_seconds_ = 0;          // generation ranks: sampling and scoring since the last report
  double generator_idle_seconds_ = 0, generator_busy_seconds_ = 0;  // training ranks: the generation ranks' reports

  // derived once
  int64_t steps_per_generation_ = 1;
  int64_t micro_steps_per_cycle_ = 1;  // steps_per_generation x μ
  bool needs_old_logps_ = false;       // TRL: only when the policy can change within a cycle, or to correct
  bool corrects_sampling_ = false;     // TRL's importance-sampling correction applies (completions from elsewhere)
  torch::Dtype logp_dtype_ = torch::kFloat32;  // log-probs, entropies, the loss: float64 with a float64 model

  // per-step measurements
  int64_t old_logprob_passes_ = 0;
  double sampling_seconds_ = 0, optimizer_seconds_ = 0;
  double generation_seconds_ = 0, train_seconds_ = 0;
  std::chrono::steady_clock::time_point run_start_, step_start_;
  int64_t first_step_ = 0;  // the optimizer step this process started at (the ETA, the segment record)
};

// Trainer(runtime, options).run()
int run_training(Runtime& runtime, const TrainOptions& options);

}  // namespace rayless
