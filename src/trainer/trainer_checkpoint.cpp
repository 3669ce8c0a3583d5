// Checkpoints: the model as an HF directory, AdamW state, the trainer state (trainer_state.h), and
// each rank's accumulated gradients when taken between optimizer steps.
#include <torch/serialize.h>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"
#include "rayless/base/files.h"
#include "rayless/base/hash.h"
#include "rayless/base/log.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/peft_adapter.h"
#include "rayless/model/lora.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/checkpoint.h"
#include "rayless/trainer/config_history.h"
#include "rayless/trainer/optimizer.h"
#include "rayless/trainer/trainer.h"
#include "rayless/trainer/torch_file.h"
#include "rayless/trainer/trainer_state.h"

namespace fs = std::filesystem;

namespace rayless {

namespace {
void copy_parameters(const std::vector<torch::Tensor>& from, std::vector<torch::Tensor> to) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
}

// The checkpoint's weights into the model this config builds, tensor by tensor by name: a checkpoint
// of another architecture is one line naming the tensor, both shapes and both models.
void copy_checkpoint_parameters(const torch::nn::Module& saved, torch::nn::Module& model, const fs::path& checkpoint,
                                const std::string& model_path) {
  const auto from = saved.named_parameters(), to = model.named_parameters();
  const std::string ours = str("model.path = ", model_path, " (the model this config trains)");
  const std::string theirs = (checkpoint / "model.safetensors").string();
  for (const auto& item : to) {
    const torch::Tensor* found = from.find(item.key());
    inputCheck(found != nullptr, "--resume: tensor ", item.key(), " of ", ours, " is not in ", theirs,
               ": the checkpoint is of another architecture");
    inputCheck(found->sizes() == item.value().sizes(), "--resume: tensor ", item.key(), " has shape ", found->sizes(),
               " in ", theirs, " but ", item.value().sizes(), " in ", ours,
               ": the checkpoint is of another model; resume with the model.path the run started with");
  }
  for (const auto& item : from)
    inputCheck(to.find(item.key()) != nullptr, "--resume: tensor ", item.key(), " of ", theirs, " is not in ", ours,
               ": the checkpoint is of another architecture");
  torch::NoGradGuard no_grad;
  for (auto& item : to) item.value().copy_(*from.find(item.key()));
}
}  // namespace

// Every rank checks what it would write (the weights and the reference's, the AdamW moments it holds,
// its accumulated gradients), and all agree: a NaN or an infinity anywhere and no checkpoint is
// written; the run stops (exit 4) with the last one as it was.
void Trainer::check_checkpoint_finite(bool at_optimizer_boundary) {
  torch::NoGradGuard no_grad;
  std::string bad;
  auto check = [&](const torch::Tensor& t, const std::string& what) {
    if (bad.empty() && t.defined() && !torch::isfinite(t).all().item<bool>()) bad = what;
  };
  for (const auto& item : policy_->named_parameters()) check(item.value(), "the model's " + item.key());
  if (!generates_) {  // a generation rank holds no reference model, optimizer or gradients
    if (cfg_.grpo.sync_ref_model)
      for (const auto& item : reference_->named_parameters()) check(item.value(), "the reference model's " + item.key());
    if (bad.empty() && !optimizer_->state_is_finite()) bad = str("the AdamW state of rank ", runtime_.rank());
    if (!at_optimizer_boundary)
      for (const torch::Tensor& g : optimizer_->accumulated_gradients()) check(g, str("the accumulated gradients of rank ", runtime_.rank()));
  }
  // over every rank, as the checkpoint itself is written: generation ranks write their part of it too
  const bool any_bad = global_max(*world_, bad.empty() ? 0.0 : 1.0) > 0;
  if (!any_bad) return;
  throw NonfiniteError(str("checkpoint at step ", optimizer_step_, " (micro-step ", micro_step_, ") not written: ",
                           bad.empty() ? std::string("a tensor another rank holds") : bad,
                           " is not finite; the last checkpoint, ", last_checkpoint_.empty() ? std::string("none yet") : last_checkpoint_,
                           ", is whole and finite (lower optim.learning_rate; docs/reliability.md, Non-finite steps)"));
}

void Trainer::save(bool at_optimizer_boundary) {
  if (last_saved_micro_step_ == micro_step_) return;
  check_checkpoint_finite(at_optimizer_boundary);
  const int rank = runtime_.rank();
  TrainerState state;
  state.optimizer_step = optimizer_step_;
  state.micro_step = micro_step_;
  state.num_tokens = num_tokens_;
  state.world_size = runtime_.size();
  state.seed = cfg_.train.seed;
  state.config_hash = config_hash_;
  state.tokenizer_hash = tokenizer_->hash();
  state.generation_step = generation_step();
  state.data_cursor = data_cursor(state.generation_step);
  state.iteration = position_in_cycle() / steps_per_generation_;
  state.micro_batch = position_in_cycle() % steps_per_generation_;
  state.num_prompts = shard_spec_.num_prompts;
  state.segment = segment_;
  state.nonfinite_steps = nonfinite_steps_;
  state.nonfinite_in_a_row = nonfinite_in_a_row_;
  if (plan_) state.async = {plan_->generation_ranks(), plan_->lag(), generators_version_};
  RankState rank_state;
  if (generates_) {
    // what a generation rank holds: the generations it sampled that the training ranks have not had yet
    rank_state.rank = rank;
    rank_state.generation_rank = true;
    const std::string dir = (output_dir_ / "rollouts" / "generated").string();
    for (const Rollouts& r : in_flight_) {
      const std::string bytes = read_text_file(step_file_path(dir, r.rank, r.step));
      rank_state.in_flight.push_back({r.step, r.policy_version, hex64(fnv1a64(bytes.data(), bytes.size()))});
    }
  } else {
    rank_state = RankState{rank, !at_optimizer_boundary, step_loss_.defined() ? step_loss_.item<float>() : 0.0f, "", optimizer_->zero_stage(), false, {}};
    // mid-cycle, the resumed run reads this rank's stored generation back: record what it must find
    if (position_in_cycle() != 0) rank_state.generation_file_hash = generation_file_hash(state.generation_step);
    optimizer_->collect_state();  // collective over the training ranks: ZeRO gathers the AdamW moments to rank 0
  }

  auto fill_rank0 = [&](const fs::path& dir) {
    if (cfg_.lora.enabled)  // PEFT's files: the base is model.path, unchanged
      write_lora_adapter(policy_, lora_settings(), fs::absolute(cfg_.model.path).string(), dir);
    else
      write_hf_files(policy_, tokenizer_.get(), dir);
    optimizer_->write_state(dir / "optimizer.pt");
    write_text_atomically(dir / "config.resolved.toml", config_to_toml(cfg_));  // what a resume compares with
    if (cfg_.grpo.sync_ref_model) save_torch_file(reference_->parameters(), dir / "reference.pt");
    write_text_atomically(dir / "trainer_state.json", state.to_json().dump(2) + "\n");
  };
  auto fill_each_rank = [&](const fs::path& dir) {
    write_text_atomically(dir / str("rank-", rank, ".json"), rank_state.to_json(cfg_.train.seed).dump(2) + "\n");
    if (!generates_ && !at_optimizer_boundary)
      save_torch_file(optimizer_->accumulated_gradients(), dir / str("grads-rank-", rank, ".pt"));
    // the generation ranks hold older weights than the checkpoint's and keep them past this meeting
    // (grpo.weight_sync_steps > 1): keep theirs too, so a resumed run samples from the same policy
    if (generates_ && plan_->generator_index(rank) == 0 && generators_version_ != optimizer_step_ &&
        !plan_->push_due(optimizer_step_, generators_version_))
      save_torch_file(trainable_parameters(*policy_), dir / "generator-weights.pt");
  };
  const fs::path path = save_checkpoint(*world_, output_dir_ / "checkpoints",
                                        checkpoint_name(optimizer_step_, micro_step_, at_optimizer_boundary), fill_rank0,
                                        fill_each_rank, cfg_.checkpoint.keep_last);
  last_saved_micro_step_ = micro_step_;
  last_saved_step_ = optimizer_step_;
  last_checkpoint_ = path.string();
  log_info(str("checkpoint: ", path.string()));
}

// The end of the run: its last checkpoint; with generation ranks taken at a last meeting, which also
// tells them that training is done.
void Trainer::finish_run() {
  if (plan_)
    meet(true);
  else
    save(true);
}

// The periodic checkpoint after an optimizer step (checkpoint.save_steps). With generation ranks it
// waits for the meeting at the next generation boundary, where they record what they hold (trainer_async.cpp).
bool Trainer::checkpoint_due() const {
  return !plan_ && cfg_.checkpoint.save_steps > 0 && optimizer_step_ % cfg_.checkpoint.save_steps == 0 &&
         micro_step_ < last_micro_step();
}

// The checkpoint's config (config_history.h) against this run's: changes that alter the run are refused
// unless allowed; strict (mid-cycle or mid-accumulation) allows none of them.
void Trainer::check_config_against(const fs::path& checkpoint, const TrainerState& state, bool strict) const {
  const fs::path record = checkpoint / "config.resolved.toml";
  if (!fs::exists(record)) {  // a checkpoint from before config records: the hash of what shapes a generation
    inputCheck(!strict || state.config_hash == config_hash_, checkpoint.string(),
               " was written under another config (config_hash ", state.config_hash, " vs ", config_hash_,
               ") in the middle of a generation cycle");
    log_warn(str("--resume: ", checkpoint.string(), " has no config.resolved.toml (an older rayless): its settings are not compared with this config"));
    return;
  }
  const std::vector<ConfigChange> changes = config_changes(read_text_file(record), config_to_toml(cfg_), record.string());
  check_resume_changes(changes, options_.allow_config_changes, strict, checkpoint.string());
  const bool data_may_change =
      !strict && std::count(options_.allow_config_changes.begin(), options_.allow_config_changes.end(), "data.path") > 0;
  inputCheck(state.num_prompts == 0 || state.num_prompts == shard_spec_.num_prompts || data_may_change, "--resume ",
             checkpoint.string(), ": data.path = ", cfg_.data.path, " now holds ", shard_spec_.num_prompts,
             " prompts, the run drew from ", state.num_prompts,
             ": the file changed; resume with the run's file, or pass --allow-config-change data.path");
  std::string changed;
  for (const ConfigChange& c : changes) changed += str(changed.empty() ? "" : ", ", c.key, " ", c.before, " -> ", c.now);
  if (!changed.empty()) log_info(str("resume: settings changed since the checkpoint: ", changed));
  for (const std::string& key : options_.allow_config_changes)
    if (std::none_of(changes.begin(), changes.end(), [&](const ConfigChange& c) { return c.key == key; }) && key != "data.path")
      log_warn(str("--allow-config-change ", key, ": the key has the checkpoint's value"));
}

// Rank 0, at the first step after a resume: this segment's config beside the run's first
// (config.resolved.toml). A resume that fails before it trains a step leaves no record.
void Trainer::record_segment_config(const fs::path& resumed_from) const {
  const std::string header = str("# rayless: the config of this run from optimizer step ", first_step_,
                                 " on, resumed from ", resumed_from.string(), " at ", runtime_.size(),
                                 " rank(s); config.resolved.toml is the config the run started with\n");
  write_text_atomically(output_dir_ / segment_config_name(first_step_), header + config_to_toml(cfg_));
}

std::string Trainer::generation_file_hash(int64_t generation_step) const {
  const std::string path = step_file_path((output_dir_ / "rollouts").string(), runtime_.rank(), generation_step);
  if (!fs::exists(path)) return "";
  const std::string bytes = read_text_file(path);
  return hex64(fnv1a64(bytes.data(), bytes.size()));
}

void Trainer::restore(const fs::path& checkpoint) {
  const fs::path state_file = checkpoint / "trainer_state.json";
  const TrainerState state = TrainerState::from_json(nlohmann::json::parse(read_text_file(state_file)), state_file.string());
  // rank 0's file says whether gradients were accumulated (every rank's says the same)
  const fs::path rank0_file = checkpoint / "rank-0.json";
  const bool mid_accumulation =
      fs::exists(rank0_file) && RankState::from_json(nlohmann::json::parse(read_text_file(rank0_file))).has_accumulated_gradients;
  const bool mid_cycle = state.mid_cycle();
  const AsyncState roles{cfg_.distributed.generation_ranks, cfg_.grpo.async_lag, -1};
  state.check_resumable(checkpoint.string(), runtime_.size(), mid_accumulation, cfg_.train.max_steps, roles);
  const bool saved_lora = is_lora_adapter_directory(checkpoint);
  inputCheck(saved_lora == cfg_.lora.enabled, checkpoint.string(),
             saved_lora ? " holds a LoRA adapter (adapter_config.json), not a whole model: resume it with lora.enabled = true"
                        : " holds a whole model, not a LoRA adapter: resume it with lora.enabled = false");
  check_config_against(checkpoint, state, mid_cycle || mid_accumulation);
  optimizer_step_ = state.optimizer_step;
  micro_step_ = state.micro_step;
  num_tokens_ = state.num_tokens;
  nonfinite_steps_ = state.nonfinite_steps;
  nonfinite_in_a_row_ = state.nonfinite_in_a_row;
  // between boundaries nothing may have changed, so the saved segment's counting goes on; at a cycle
  // and optimizer-step boundary a new segment begins here, with this run's geometry
  segment_ = mid_cycle || mid_accumulation
                 ? state.segment
                 : SegmentStart{state.micro_step, state.optimizer_step, state.generation_step, state.data_cursor};
  if (segment_.data_cursor.offset > shard_spec_.num_prompts)  // a dataset changed on purpose: its next epoch
    segment_.data_cursor = {segment_.data_cursor.epoch + 1, 0};
  generators_version_ = state.async.generators_version;
  last_saved_micro_step_ = micro_step_;
  last_saved_step_ = optimizer_step_;
  last_checkpoint_ = checkpoint.string();
  if (generates_) return restore_generation_rank(checkpoint, state);  // trainer_async.cpp
  load_policy_weights(checkpoint);
  optimizer_->load_state(checkpoint / "optimizer.pt");
  if (cfg_.grpo.sync_ref_model && fs::exists(checkpoint / "reference.pt")) {
    std::vector<torch::Tensor> saved;
    torch::load(saved, (checkpoint / "reference.pt").string());
    copy_parameters(saved, reference_->parameters());
  }
  const fs::path rank_file = checkpoint / str("rank-", runtime_.rank(), ".json");
  const RankState rank_state = fs::exists(rank_file)
                                   ? RankState::from_json(nlohmann::json::parse(read_text_file(rank_file)))
                                   : RankState{};
  expected_generation_hash_ = mid_cycle ? rank_state.generation_file_hash : "";
  if (mid_accumulation) {
    // whole gradients (stages 0, 1) or this rank's slices (stage 2): the layouts do not convert
    const int64_t stage = optimizer_->zero_stage();
    inputCheck((rank_state.zero_stage == 2) == (stage == 2), checkpoint.string(),
               " was taken between optimizer steps with distributed.zero_stage = ", rank_state.zero_stage,
               "; resume it with zero_stage ", rank_state.zero_stage == 2 ? "2" : "0 or 1", " (now ", stage, ")");
    std::vector<torch::Tensor> grads;
    torch::load(grads, (checkpoint / str("grads-rank-", runtime_.rank(), ".pt")).string());
    optimizer_->set_accumulated_gradients(grads);
    step_loss_ = torch::full({}, rank_state.step_loss_float32, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  }
  log_info(str("resumed from ", checkpoint.string(), " at step ", optimizer_step_, " (micro-step ", micro_step_, ")"));
}

// The checkpoint's policy (a whole model, or a LoRA adapter over model.path) into this rank's model.
void Trainer::load_policy_weights(const fs::path& checkpoint) {
  const bool saved_lora = is_lora_adapter_directory(checkpoint);
  if (saved_lora) {
    const LoraSettings saved = read_lora_config(checkpoint), now = lora_settings();
    inputCheck(saved.r == now.r && saved.alpha == now.alpha && saved.use_rslora == now.use_rslora,
               (checkpoint / "adapter_config.json").string(), ": the adapter has r = ", saved.r, ", lora_alpha = ",
               saved.alpha, ", use_rslora = ", saved.use_rslora ? "true" : "false", "; the config says lora.r = ", now.r,
               ", lora.alpha = ", now.alpha, ", lora.use_rslora = ", now.use_rslora ? "true" : "false");
    load_lora_adapter(policy_, checkpoint);  // the base is model.path, loaded at start
  } else {
    copy_checkpoint_parameters(*load_hf_model(checkpoint, policy_->dtype(), device_), *policy_, checkpoint, cfg_.model.path);
  }
}

}  // namespace rayless
