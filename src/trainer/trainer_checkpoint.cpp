// Checkpoints: the model as an HF directory, AdamW state, the trainer state (trainer_state.h), and
// each rank's accumulated gradients when taken between optimizer steps.
#include <torch/serialize.h>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/hash.h"
#include "rayless/base/log.h"
#include "rayless/model/hf_checkpoint.h"
#include "rayless/model/tokenizer.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/checkpoint.h"
#include "rayless/trainer/optimizer.h"
#include "rayless/trainer/trainer.h"
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
  RankState rank_state{rank, !at_optimizer_boundary, step_loss_float32_, ""};
  // mid-cycle, the resumed run reads this rank's stored generation back: record what it must find
  if (micro_step_ % micro_steps_per_cycle_ != 0)
    rank_state.generation_file_hash = generation_file_hash(state.generation_step);

  auto fill_rank0 = [&](const fs::path& dir) {
    write_hf_files(policy_, tokenizer_.get(), dir);
    torch::save(optimizer_->adamw(), (dir / "optimizer.pt").string());
    if (cfg_.grpo.sync_ref_model) torch::save(reference_->parameters(), (dir / "reference.pt").string());
    write_text_atomically(dir / "trainer_state.json", state.to_json().dump(2) + "\n");
  };
  auto fill_each_rank = [&](const fs::path& dir) {
    write_text_atomically(dir / str("rank-", rank, ".json"), rank_state.to_json(cfg_.train.seed).dump(2) + "\n");
    if (!at_optimizer_boundary) {
      std::vector<torch::Tensor> grads;
      for (const auto& p : policy_->parameters()) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
      torch::save(grads, (dir / str("grads-rank-", rank, ".pt")).string());
    }
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
  copy_parameters(load_hf_model(checkpoint, policy_->dtype(), device_)->parameters(), policy_->parameters());
  torch::load(optimizer_->adamw(), (checkpoint / "optimizer.pt").string());
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
    std::vector<torch::Tensor> grads;
    torch::load(grads, (checkpoint / str("grads-rank-", runtime_.rank(), ".pt")).string());
    auto params = policy_->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
    step_loss_float32_ = rank_state.step_loss_float32;
  }
  last_saved_micro_step_ = micro_step_;
  log_info(str("resumed from ", checkpoint.string(), " at step ", optimizer_step_, " (micro-step ", micro_step_, ")"));
}

}  // namespace rayless
