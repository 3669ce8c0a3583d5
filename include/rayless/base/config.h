// The typed configuration: TOML sections [model] [tokenizer] [data] [generation] [reward] [grpo]
// [optim] [train] [checkpoint] [log] [distributed]. Key names follow TRL's GRPOConfig wherever one
// exists. Every key is declared once in config_fields() (src/base/config.cpp) with its type, default,
// allowed values and one line of documentation; loading, `--set`, `config show` and the docs check all
// read that one table. docs/config.md must document every key (a test enforces it).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rayless/base/choices.h"

namespace toml {
inline namespace v3 {
class node;
}
}  // namespace toml

namespace rayless {

struct ModelConfig {
  std::string path = "configs/models/tiny";  // HF model directory (config.json [+ safetensors])
  ModelDtype dtype = ModelDtype::Float32;     // float16 on GPU only; float64 for reference checks
  DeviceChoice device = DeviceChoice::Auto;
  int64_t init_seed = 1234;                  // initialises weights when the directory has none
};

struct TokenizerConfig {
  std::string path = "";                 // tokenizer.json; "" = the model directory's; "byte" = byte-level
  // auto (the model's own template, else none) | none | chatml | a template name of the model | a
  // .jinja file | an inline Jinja template | a legacy string containing {prompt}
  std::string chat_template = "auto";
  std::string chat_template_kwargs = "{}";  // JSON object of extra template variables (a TOML table)
  std::string system_prompt = "";        // system message when a plain-text prompt is wrapped ("" = none)
};

struct DataConfig {
  std::string path = "data/demo/prompts.jsonl";
  std::string prompt_field = "prompt";      // or messages_field for chat datasets
  std::string messages_field = "messages";
  bool shuffle = true;
  bool skip_invalid = false;                // skip and count bad lines instead of failing
  int64_t max_prompt_length = 256;          // tokens
  PromptTruncation truncation = PromptTruncation::Error;  // or Left: keep the last max_prompt_length tokens
};

struct GenerationConfig {
  int64_t max_completion_length = 512;           // TRL's GRPOConfig default
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;                        // 0 = off
  double min_p = 0.0;                       // 0 = off
  double repetition_penalty = 1.0;
  std::vector<std::string> stop_strings;
  std::vector<int64_t> eos_token_ids;       // empty = the tokenizer's / generation_config's
  bool fused_weights = true;                // decode on fused, packed copies (FusedGenerationWeights)
  // the generation engine (sampler/generation_engine.h); 0 = "auto"
  int64_t slots = 0;
  int64_t prefill_chunk = 0;
  int64_t sync_interval = 0;
  std::string cuda_graphs = "auto";         // auto | on | off
};

// [reward.workers.NAME]: a reward worker of its own (a long-running process, docs/rewards.md).
struct RewardWorkerConfig {
  std::string command;      // /bin/sh -c COMMAND
  double timeout_s = 60.0;  // seconds it may take per request
  int64_t batch_size = 0;   // 0 = one JSON line per completion
  std::string where;        // "file:line: " of its table, for errors ("" when made by --set)
};

// [reward.models.NAME]: a Hugging Face *ForSequenceClassification directory (num_labels = 1).
struct RewardModelConfig {
  std::string path;         // model directory (config.json, safetensors, tokenizer)
  std::string tokenizer;    // tokenizer.json (default: the model directory's)
  int64_t batch_size = 8;   // texts per forward pass
  std::string chat_template = "auto";  // renders conversational rows: the reward model's own template
  std::string where;        // "file:line: " of its table, for errors ("" when made by --set)
};

struct RewardConfig {
  // built-ins (length | format | answer | repetition | worker) or names of [reward.workers.NAME] /
  // [reward.models.NAME] tables
  std::vector<std::string> functions = {"length"};
  std::vector<double> reward_weights;               // empty = all 1.0
  int64_t length_target = 32;                       // length reward: -|target - len(completion)|
  LengthUnit length_unit = LengthUnit::Tokens;
  std::string format_pattern = "";                  // format reward: regex the completion must match
  std::string answer_field = "answer";              // answer reward: dataset field to compare with
  AnswerMode answer_mode = AnswerMode::Exact;
  int64_t repetition_ngram = 3;                     // repetition penalty: n-gram size
  std::string worker_command = "";                  // worker reward: command line of the worker
  double worker_timeout_s = 60.0;
  int64_t worker_batch_size = 0;                    // 0 = one JSON line per completion
  std::map<std::string, RewardWorkerConfig> workers;  // [reward.workers.NAME]
  std::map<std::string, RewardModelConfig> models;    // [reward.models.NAME]
};

// [tools.NAME]: a tool worker, a long-running process serving TRL-style Python functions (docs/tools.md).
struct ToolWorkerConfig {
  std::string command;      // /bin/sh -c COMMAND
  double timeout_s = 60.0;  // seconds one tool call may take
};

// [environment]: the worker holding one environment instance per rollout (TRL's environment_factory).
struct EnvironmentConfig {
  std::string command = "";  // empty = no environment
  double timeout_s = 60.0;   // seconds one reset, tool call or reward may take
};

// [agent]: how tool calls are read and how many rounds of them a rollout may run.
struct AgentConfig {
  int64_t max_tool_calling_iterations = -1;  // TRL's None: -1 = no limit; 0 = tools never run
  std::string tool_call_format = "auto";     // auto (from the chat template) | qwen | llama3
  bool keep_kv_cache = true;                 // later turns resume on the kept keys and values (kept_kv.h)
};

struct GrpoConfig {
  int64_t num_generations = 8;                     // TRL's GRPOConfig default
  int64_t num_iterations = 1;                       // mu: optimisation passes per generation
  int64_t steps_per_generation = 0;                 // 0 = from generation_batch_size, else gradient_accumulation_steps
  int64_t generation_batch_size = 0;                // completions per generation, all ranks; 0 = derived
  double beta = 0.0;                                // KL coefficient (k3 estimator)
  double epsilon = 0.2;                             // lower clip: ratio >= 1 - epsilon
  double epsilon_high = 0.0;                        // upper clip: ratio <= 1 + epsilon_high; 0 = epsilon
  double delta = 0.0;                               // upper cap on the ratio (two-sided clipping); 0 = off
  LossType loss_type = LossType::Dapo;
  ScaleRewards scale_rewards = ScaleRewards::Group;
  RewardAggregation multi_objective_aggregation = RewardAggregation::SumThenNormalize;
  ImportanceSamplingLevel importance_sampling_level = ImportanceSamplingLevel::Token;
  double top_entropy_quantile = 1.0;                // < 1: train only the highest-entropy tokens
  EntropyThresholdMethod entropy_threshold_method = EntropyThresholdMethod::Gather;  // or Select (histograms)
  bool mask_truncated_completions = false;
  bool use_bias_correction_kl = true;               // KL term times the importance ratio (TRL's default)
  double sapo_temperature_pos = 1.0;
  double sapo_temperature_neg = 1.05;
  bool sync_ref_model = false;
  double ref_model_mixup_alpha = 0.6;
  int64_t ref_model_sync_steps = 512;
  int64_t logprob_chunk_size = 256;                 // positions per LM-head chunk in the fused path
  // the old/reference log-prob passes (no gradients) take completions longer than this in pieces of
  // this many positions on a KV cache of the prompt (0: one pass); bounds their activations for long
  // completions (issue 51)
  int64_t logprob_sequence_chunk_size = 2048;
  // asynchronous GRPO (distributed.generation_ranks > 0, docs/distributed.md)
  int64_t async_lag = 0;                            // generation g is sampled by the policy of cycle g - async_lag
  int64_t weight_sync_steps = 1;                    // optimizer steps between weight pushes to the generators
  // TRL's correction of rollouts sampled by another engine (generator ranks, a replay file with log-probs)
  bool vllm_importance_sampling_correction = true;
  ImportanceSamplingMode vllm_importance_sampling_mode = ImportanceSamplingMode::SequenceMask;
  double vllm_importance_sampling_clip_max = 3.0;   // C_max; 0 = none (TRL's None)
  double vllm_importance_sampling_clip_min = 0.0;   // C_min; 0 = none (TRL's None)
  double off_policy_mask_threshold = 0.0;           // DeepSeek-V3.2's off-policy sequence mask; 0 = off (TRL's None)
};

struct OptimConfig {
  double learning_rate = 1e-6;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;                       // 0 = no clipping
  LrSchedule lr_scheduler_type = LrSchedule::Linear;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0.0;
};

struct TrainConfig {
  int64_t max_steps = 20;                           // optimizer steps
  int64_t seed = 42;
  int64_t per_device_train_batch_size = 8;          // completions per rank per micro-step
  int64_t gradient_accumulation_steps = 1;
  bool bf16 = true;                                 // TRL's GRPOConfig default
  std::string bf16_products = "auto";               // auto | bfloat16 | float32 (ops/kernel_plan.h)
  bool gradient_checkpointing = true;               // TRL's GRPOConfig default
  bool padding_free = true;                         // log-prob passes skip padding and repeated prompts
  std::string output_dir = "runs/default";
  std::string replay_rollouts = "";                 // JSONL of prompts + completions to replay instead of sampling
  int64_t max_nonfinite_steps = 3;                  // non-finite steps in a row (skipped) before the run stops
};

struct CheckpointConfig {
  int64_t save_steps = 500;                         // transformers' default; 0 = only at the end and on signal
  int64_t keep_last = 2;
  bool save_on_signal = true;
};

struct LogConfig {
  int64_t logging_steps = 10;                       // TRL's GRPOConfig default
  bool console = true;                              // one progress line per step on rank 0
  LogLevel level = LogLevel::Info;
  bool tensorboard = false;                         // event files in OUTPUT/tensorboard/
  int64_t num_completions_to_print = 0;             // sample table at each logging step (TRL's log_completions)
};

// Evaluation during training on a held-out prompt set (TRL's eval_strategy = "steps").
struct EvalConfig {
  std::string path;                                 // JSONL in the training format; empty = no eval
  int64_t steps = 0;                                // every N optimizer steps (0 = only at the end)
  int64_t num_generations = 1;                      // completions per eval prompt
  int64_t max_samples = 0;                          // first N prompts (0 = all)
  bool greedy = true;                               // greedy decoding, else sampled as in training
};

// LoRA adapters (PEFT's LoraConfig names): only the adapters train; the base is frozen.
struct LoraConfig {
  bool enabled = false;
  int64_t r = 8;
  double alpha = 8.0;                               // PEFT: lora_alpha
  double dropout = 0.0;                             // PEFT: lora_dropout
  std::vector<std::string> target_modules{"q_proj", "v_proj"};  // names, or "all-linear"
  bool use_rslora = false;                          // scaling alpha / sqrt(r) instead of alpha / r
};

struct DistributedConfig {
  std::string backend = "auto";                     // auto | mpi | nccl
  double collective_timeout_s = 300.0;              // watchdog deadline per collective
  int64_t threads_per_rank = 0;                     // 0 = the cores the rank is bound to; unbound: node cores / node ranks
  int64_t bucket_size_mb = 0;                       // gradient allreduce bucket size; 0 = by backend
  int64_t zero_stage = 0;                           // 0 replicated, 1 sharded AdamW state, 2 + sharded gradients
  int64_t generation_ranks = 0;                     // the last K ranks only generate (asynchronous GRPO); 0 = every rank does both
  WeightSyncDtype weight_sync_dtype = WeightSyncDtype::Model;  // how weights travel to the generation ranks
};

struct Config {
  ModelConfig model;
  TokenizerConfig tokenizer;
  DataConfig data;
  GenerationConfig generation;
  RewardConfig reward;
  GrpoConfig grpo;
  OptimConfig optim;
  TrainConfig train;
  CheckpointConfig checkpoint;
  LogConfig log;
  DistributedConfig distributed;
  EvalConfig eval;
  LoraConfig lora;
  std::map<std::string, ToolWorkerConfig> tools;  // [tools.NAME]
  EnvironmentConfig environment;
  AgentConfig agent;

  // tools or an environment: completions run the multi-turn tool loop (agent/agent_rollout.h)
  bool agentic() const { return !tools.empty() || !environment.command.empty(); }

  // derived values, always consistent with the keys above
  double effective_epsilon_high() const { return grpo.epsilon_high > 0 ? grpo.epsilon_high : grpo.epsilon; }
  // the ranks that train (data parallel among themselves): all but the distributed.generation_ranks;
  // the batch geometry below counts these
  int64_t training_ranks(int64_t world_size) const { return world_size - distributed.generation_ranks; }
  // micro-batches per rank in one generation, as TRL resolves it: steps_per_generation when set, else
  // generation_batch_size / (per_device_train_batch_size x world_size) when set, else
  // gradient_accumulation_steps. check_batch_geometry says what is wrong with a combination.
  int64_t effective_steps_per_generation(int64_t world_size) const;
  // completions per generation over all ranks: a whole number of groups (TRL's generation_batch_size)
  int64_t global_generation_batch(int64_t world_size) const {
    return train.per_device_train_batch_size * world_size * effective_steps_per_generation(world_size);
  }
};

// One key of the table: everything loading, --set, show and the docs check need.
struct ConfigField {
  std::string name;       // "grpo.num_generations"
  std::string type;       // bool | int | float | string | string list | int list | float list
  std::string allowed;    // "1 <= n", "group | batch | none", ... ("" = any)
  std::string doc;        // one line
  std::function<void(Config&, const toml::node&, const std::string& where)> set;
  std::function<std::string(const Config&)> show;  // TOML literal
};

const std::vector<ConfigField>& config_fields();

// The shortest text that reads back as the same double (0.2, not 0.20000000000000001; 300.0, not
// 3e+02): std::to_chars' shortest form, in plain notation unless the exponent form is shorter.
std::string float_literal(double v);

// Loads a TOML file: unknown sections/keys (with "did you mean"), wrong types and out-of-range
// values are InputErrors naming file, line and key. Then applies `overrides` ("section.key=value",
// the value parsed as TOML, else taken as a string) and checks cross-field rules.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Defaults plus overrides, no file.
Config config_from_overrides(const std::vector<std::string>& overrides);
void apply_override(Config& config, const std::string& assignment);
// Cross-field rules, one table: validation and the docs (`rayless config reference`) both read it.
struct CrossFieldRule {
  std::string rule;        // one line for docs/config.md
  bool needs_world_size;   // checked at start (check_batch_geometry), when the ranks are known
  std::function<std::string(const Config&, int64_t world_size)> violation;  // "" = kept, else the error
};
const std::vector<CrossFieldRule>& cross_field_rules();
void validate_config(const Config& config);  // the rules that need no world size; throws InputError
void check_batch_geometry(const Config& config, int64_t world_size);  // the others (TRL's batch checks); all ranks
const std::vector<std::string>& known_reward_functions();  // reward.functions may name these
std::string config_to_toml(const Config& config);  // resolved config, every key, with sections
// Hash of the keys that decide what a generation step produces (model, tokenizer, data, generation,
// reward, grpo.num_generations): a rollout store written under another hash is refused on reuse.
std::string config_hash(const Config& config);

// Closest valid key to `key` (edit distance), for "did you mean" messages; "" if nothing is close.
std::string closest_config_key(const std::string& key);
// TRL's names that rayless spells differently, each with the key it points to (a TRL user's habit gets
// a pointer, not just "unknown"): load_config's hints, and the list `rayless config reference` prints
// for docs/config.md, which docs/from-trl.md must agree with.
const std::map<std::string, std::string>& trl_names();

}  // namespace rayless
