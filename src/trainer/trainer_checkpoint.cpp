// Checkpoints: the model as an HF directory, AdamW state, the trainer state (trainer_state.h), and
// each rank's accumulated gradients when taken between optimizer steps.
#include <torch/serialize.h>

#include "rayless/base/error.h"
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
}  // namespace

void Trainer::save(bool at_optimizer_boundary) {
  if (last_saved_micro_step_ == micro_step_) return;
  const int rank = runtime_.rank();
  TrainerState state;
  state.optimizer_step = optimizer_step_;
  state.micro_step = micro_step_;
  state.num_tokens = num_tokens_;
  state.world_size = runtime_.size();
  state.seed = cfg_.train.seed;
  state.config_hash = config_hash_;
  state.tokenizer_hash = tokenizer_->hash();
  state.generation_step = micro_step_ / micro_steps_per_cycle_;
  state.data_cursor = cursor_at_step(shard_spec_, state.generation_step);
  state.iteration = (micro_step_ % micro_steps_per_cycle_) / steps_per_generation_;
  state.micro_batch = micro_step_ % steps_per_generation_;
  RankState rank_state{rank, !at_optimizer_boundary, step_loss_float32_, "", optimizer_->zero_stage()};
  // mid-cycle, the resumed run reads this rank's stored generation back: record what it must find
  if (micro_step_ % micro_steps_per_cycle_ != 0)
    rank_state.generation_file_hash = generation_file_hash(state.generation_step);

  optimizer_->collect_state();  // collective: ZeRO gathers the AdamW moments to rank 0
  auto fill_rank0 = [&](const fs::path& dir) {
    if (cfg_.lora.enabled)  // PEFT's files: the base is model.path, unchanged
      write_lora_adapter(policy_, lora_settings(), fs::absolute(cfg_.model.path).string(), dir);
    else
      write_hf_files(policy_, tokenizer_.get(), dir);
    optimizer_->write_state(dir / "optimizer.pt");
    if (cfg_.grpo.sync_ref_model) save_torch_file(reference_->parameters(), dir / "reference.pt");
    write_text_atomically(dir / "trainer_state.json", state.to_json().dump(2) + "\n");
  };
  auto fill_each_rank = [&](const fs::path& dir) {
    write_text_atomically(dir / str("rank-", rank, ".json"), rank_state.to_json(cfg_.train.seed).dump(2) + "\n");
    if (!at_optimizer_boundary)
      save_torch_file(optimizer_->accumulated_gradients(), dir / str("grads-rank-", rank, ".pt"));
  };
  const fs::path path = save_checkpoint(*comm_, output_dir_ / "checkpoints",
                                        checkpoint_name(optimizer_step_, micro_step_, at_optimizer_boundary), fill_rank0,
                                        fill_each_rank, cfg_.checkpoint.keep_last);
  last_saved_micro_step_ = micro_step_;
  log_info(str("checkpoint: ", path.string()));
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
  const bool mid_cycle = state.micro_step % micro_steps_per_cycle_ != 0;
  const bool mid_accumulation = state.micro_step % cfg_.train.gradient_accumulation_steps != 0;
  state.check_resumable(checkpoint.string(), runtime_.size(), config_hash_, mid_cycle, mid_accumulation,
                        cfg_.train.max_steps * cfg_.train.gradient_accumulation_steps, cfg_.train.max_steps);
  optimizer_step_ = state.optimizer_step;
  micro_step_ = state.micro_step;
  num_tokens_ = state.num_tokens;
  const bool saved_lora = is_lora_adapter_directory(checkpoint);
  inputCheck(saved_lora == cfg_.lora.enabled, checkpoint.string(),
             saved_lora ? " holds a LoRA adapter (adapter_config.json), not a whole model: resume it with lora.enabled = true"
                        : " holds a whole model, not a LoRA adapter: resume it with lora.enabled = false");
  if (saved_lora) {
    const LoraSettings saved = read_lora_config(checkpoint), now = lora_settings();
    inputCheck(saved.r == now.r && saved.alpha == now.alpha && saved.use_rslora == now.use_rslora,
               (checkpoint / "adapter_config.json").string(), ": the adapter has r = ", saved.r, ", lora_alpha = ",
               saved.alpha, ", use_rslora = ", saved.use_rslora ? "true" : "false", "; the config says lora.r = ", now.r,
               ", lora.alpha = ", now.alpha, ", lora.use_rslora = ", now.use_rslora ? "true" : "false");
    load_lora_adapter(policy_, checkpoint);  // the base is model.path, loaded at start
  } else {
    copy_parameters(load_hf_model(checkpoint, policy_->dtype(), device_)->parameters(), policy_->parameters());
  }
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
    step_loss_float32_ = rank_state.step_loss_float32;
  }
  last_saved_micro_step_ = micro_step_;
  log_info(str("resumed from ", checkpoint.string(), " at step ", optimizer_step_, " (micro-step ", micro_step_, ")"));
}

}  // namespace rayless
