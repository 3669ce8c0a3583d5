// Asynchronous GRPO (distributed.generation_ranks > 0): where the two roles meet, the generation
// ranks' loop, and the training ranks' side of the handover. The schedule (async_plan.h): at the start
// of every generation cycle c all ranks meet (stop? checkpoint? new weights?), then the generation
// ranks hand generation c to the training ranks and sample generation c + async_lag with the weights
// of this meeting while the training ranks train on c. Which policy samples what is fixed by the
// schedule, never by timing, so runs reproduce and resume exactly.
#include <torch/serialize.h>

#include <algorithm>

#include "rayless/base/failure_message.h"
#include "rayless/base/files.h"
#include "rayless/base/hash.h"
#include "rayless/base/log.h"
#include "rayless/comm/communicator.h"
#include "rayless/grpo/advantages.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/model/lora.h"
#include "rayless/rewards/rewards.h"
#include "rayless/rollout/rollout_exchange.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/runtime/runtime.h"
#include "rayless/runtime/signals.h"
#include "rayless/runtime/watchdog.h"
#include "rayless/trainer/trainer.h"
#include "rayless/trainer/weight_sync.h"
#include "trainer/trainer_internal.h"

namespace fs = std::filesystem;

namespace rayless {

using namespace trainer_detail;

namespace {
// what each rank says at a meeting (one int64 each, allgathered)
enum MeetingField { kSignal, kTrainingDone, kSaveDue, kVersion, kMicroStep, kBusyMicros, kIdleMicros, kFields };

int64_t micros(double seconds) { return static_cast<int64_t>(seconds * 1e6); }
}  // namespace

// All ranks, at the start of every generation cycle and once at the end. One allgather: any rank's
// stop signal, and from training rank 0 whether training is done, whether a periodic checkpoint is
// due, the policy version and the micro-step; from the generation ranks how long they sampled and
// waited. Then, on every rank alike: the checkpoint, and new weights to the generation ranks when due.
Trainer::Meeting Trainer::meet(bool training_done) {
  const auto start = Clock::now();
  const int64_t save_steps = cfg_.checkpoint.save_steps;
  std::vector<int64_t> mine(kFields, 0);
  mine[kSignal] = cfg_.checkpoint.save_on_signal ? stop_signal_number() : 0;
  mine[kTrainingDone] = training_done ? 1 : 0;
  mine[kSaveDue] = save_steps > 0 && optimizer_step_ / save_steps > last_saved_step_ / save_steps ? 1 : 0;
  mine[kVersion] = optimizer_step_;
  mine[kMicroStep] = micro_step_;
  mine[kBusyMicros] = micros(busy_seconds_);
  mine[kIdleMicros] = micros(idle_seconds_);
  const torch::Tensor all = world_->allgather(torch::tensor(mine, torch::kInt64));  // [ranks, kFields]
  auto said = all.accessor<int64_t, 2>();
  Meeting meeting;
  for (int r = 0; r < world_->size(); ++r) meeting.signal = std::max<int>(meeting.signal, static_cast<int>(said[r][kSignal]));
  meeting.stop = meeting.signal != 0 || said[0][kTrainingDone] != 0;
  if (generates_) {
    // the training ranks' progress is the generation ranks' clock (checkpoint names, the watchdog's step)
    optimizer_step_ = said[0][kVersion];
    micro_step_ = said[0][kMicroStep];
    set_watchdog_step(optimizer_step_);
    busy_seconds_ = idle_seconds_ = 0;  // reported
  } else {
    double busy = 0, idle = 0;
    for (int r = static_cast<int>(plan_->training_ranks()); r < world_->size(); ++r)
      busy += static_cast<double>(said[r][kBusyMicros]) * 1e-6, idle += static_cast<double>(said[r][kIdleMicros]) * 1e-6;
    generator_busy_seconds_ += busy / static_cast<double>(plan_->generation_ranks());
    generator_idle_seconds_ += idle / static_cast<double>(plan_->generation_ranks());
  }
  double waited = seconds_since(start);
  if (said[0][kSaveDue] != 0 || meeting.stop) {
    if (meeting.signal != 0)
      log_info(str("rayless train: a stop signal (", meeting.signal, ") was received: checkpointing at generation ",
                   generation_step(), " (micro-step ", micro_step_, "); resume with --resume auto"));
    save(at_optimizer_boundary());
  }
  if (meeting.stop) {
    idle_seconds_ += waited;
    return meeting;
  }
  const auto push_start = Clock::now();
  const int64_t version = said[0][kVersion];
  if (plan_->push_due(version, generators_version_)) {
    if (weights_comm_) {
      const UncountedCollectives not_all_training_ranks;  // training rank 0 alone of its role sends
      const int64_t bucket_mb = cfg_.distributed.bucket_size_mb > 0 ? cfg_.distributed.bucket_size_mb
                                                                     : (world_->backend_name() == "nccl" ? 25 : 4);
      const std::optional<torch::Dtype> wire =
          cfg_.distributed.weight_sync_dtype == WeightSyncDtype::BFloat16 ? std::optional<torch::Dtype>(torch::kBFloat16)
                                                                          : std::nullopt;
      broadcast_weights(*weights_comm_, trainable_parameters(*policy_), 0, wire, bucket_mb * 1024 * 1024);
    }
    generators_version_ = version;
  }
  waited += seconds_since(push_start);
  idle_seconds_ += waited;
  return meeting;
}

// The rows of generation `cycle` from the generation ranks to the training ranks: every generation
// rank's share, joined in rank order (the training ranks send none). Collective over all ranks.
Rollouts Trainer::hand_over(const Rollouts& share) {
  const auto start = Clock::now();
  Rollouts all = allgather_rollouts(*world_, share);
  idle_seconds_ += seconds_since(start);
  return all;
}

// ---------------------------------------------------------------------------------------------------
// The generation ranks' loop, top to bottom.
int Trainer::generate_for_trainers() {
  const int64_t last = last_generation_step();
  // a checkpoint in the middle of a cycle (the end of a run): the training ranks meet again at the next
  const int64_t first = generation_step() + (position_in_cycle() == 0 ? 0 : 1);
  int64_t next = in_flight_.empty() ? first : in_flight_.back().step + 1;  // the next generation to sample
  for (int64_t cycle = first;; ++cycle) {
    const Meeting meeting = meet(false);
    if (meeting.stop) return meeting.signal != 0 ? kExitCheckpointedOnSignal : kExitOk;
    while (next <= cycle) generate_share(next++);  // on-policy (lag 0), or a run's first generation
    runtimeCheck(!in_flight_.empty() && in_flight_.front().step == cycle, "generation rank ", runtime_.rank(),
                 " holds no generation ", cycle, " to hand over");
    hand_over(in_flight_.front());
    in_flight_.pop_front();
    // the lag: sampled while the training ranks train on this cycle's generation
    while (next <= std::min(cycle + plan_->lag(), last)) generate_share(next++);
  }
}

// This generation rank's share of a generation: its rows sampled and scored, advantages over the
// whole generation (the generation ranks exchange rewards, as training ranks do), stored under
// rollouts/generated/ and kept until handed over.
void Trainer::generate_share(int64_t generation_step) {
  const MemoryPhase phase(str("generation ", generation_step, " (sampling, rewards)"));
  const auto start = Clock::now();
  const int64_t j = plan_->generator_index(runtime_.rank());
  const std::vector<RowPiece> pieces = plan_->pieces(j);
  std::vector<Drawn> drawn;
  std::vector<torch::Tensor> rewards;
  for (const RowPiece& piece : pieces) {
    drawn.push_back(draw_sampled(generation_step, piece));
    rewards.push_back(score(drawn.back()));
  }
  const torch::Tensor all_rewards_per_func = torch::cat(role_comm_->allgather_variable(torch::cat(rewards, 0)), 0);
  AdvantageSettings settings{cfg_.grpo.num_generations, cfg_.grpo.scale_rewards, cfg_.grpo.multi_objective_aggregation};
  const AdvantageOutput all = compute_advantages(all_rewards_per_func, rewards_->weights(), settings);
  std::vector<Rollouts> parts;
  for (size_t i = 0; i < pieces.size(); ++i) {
    RolloutBatch& rows = drawn[i].rows;
    rows.advantages = all.advantages.slice(0, pieces[i].first, pieces[i].last);
    rows.sampling_logps = drawn[i].sampled.logprobs.to(logp_dtype_);
    RolloutExtras extras{rewards[i], all.rewards.slice(0, pieces[i].first, pieces[i].last), drawn[i].sampled.entropies, {}, {}};
    parts.push_back(pack_rollouts(rows, j, extras));
    // the training ranks' non-finite guard needs them: they do not sample
    parts.back().nonfinite_logits = drawn[i].sampled.nonfinite.defined()
                                        ? drawn[i].sampled.nonfinite.to(torch::kCPU, torch::kBool)
                                        : torch::zeros({rows.size()}, torch::kBool);
  }
  Rollouts share = join_rollouts(parts);
  share.step = generation_step;
  share.rank = j;
  share.policy_version = generators_version_;
  RolloutAttrs attrs = store_attrs(cfg_.grpo.num_generations);
  attrs.world_size = plan_->generation_ranks();
  attrs.strings["role"] = "generation";
  attrs.numbers["first_row"] = static_cast<double>(pieces.front().first);
  attrs.numbers["temperature"] = cfg_.generation.temperature;
  write_rollouts((output_dir_ / "rollouts" / "generated").string(), share, attrs);
  in_flight_.push_back(std::move(share));
  busy_seconds_ += seconds_since(start);
}

// ---------------------------------------------------------------------------------------------------
// The training ranks' side: generation `generation_step` from the generation ranks, this rank's rows
// of it finished as a sampled generation is (advantages, old/reference log-probs, the correction).
Trainer::Generation Trainer::receive_generation(int64_t generation_step) {
  const Rollouts all = hand_over(Rollouts{});
  runtimeCheck(all.step == generation_step, "training rank ", comm_->rank(), " expected generation ",
               generation_step, " from the generation ranks and got ", all.step);
  const RowPiece mine = own_rows();
  Drawn drawn = draw_received(generation_step, slice_rollouts(all, mine.first, mine.last));
  const torch::Tensor rewards_per_func = all.rewards_per_func.slice(0, mine.first, mine.last).to(torch::kFloat32);
  Generation generation = finish_generation(std::move(drawn), rewards_per_func);
  generation.metrics["async/policy_version"] = static_cast<double>(all.policy_version);
  generation.metrics["async/lag"] = static_cast<double>(optimizer_step_ - all.policy_version);
  return generation;
}

// This rank's rows as received: the prompts drawn here (checked against what the generation ranks
// drew), the completions, the sampler's log-probs and entropies as they sent them.
Trainer::Drawn Trainer::draw_received(int64_t generation_step, const Rollouts& mine) {
  Drawn drawn = draw_prompts(generation_step, own_rows());
  const int64_t n = mine.size();
  runtimeCheck(n == static_cast<int64_t>(drawn.rows.group_index.size()) &&
                   torch::equal(mine.group_index, torch::tensor(drawn.rows.group_index, torch::kInt64)),
               "generation ", generation_step, ": the generation ranks sampled other prompts than training rank ",
               comm_->rank(), " draws");
  const torch::Tensor lengths = mine.completion_offsets.slice(0, 1) - mine.completion_offsets.slice(0, 0, n);
  const int64_t width = lengths.max().item<int64_t>();  // as the sampler's output: its longest completion
  RolloutBatch received = unpack_rollouts(mine, width, tokenizer_->pad_id());
  RolloutBatch& rows = drawn.rows;
  rows.completion_ids = received.completion_ids;
  rows.completion_mask = received.completion_mask;
  rows.truncated = received.truncated;
  rows.raw_lengths = received.raw_lengths;
  rows.policy_version = mine.policy_version;
  drawn.sampled.logprobs = received.sampling_logps;
  drawn.sampled.entropies = padded_rows(mine.entropies, mine.completion_offsets, width, 0.0);
  if (mine.nonfinite_logits.defined()) drawn.sampled.nonfinite = mine.nonfinite_logits;
  drawn.sampled_elsewhere = true;
  if (comm_->rank() == 0 && cfg_.log.num_completions_to_print > 0)  // the sample table's texts
    for (int64_t i = 0; i < n; ++i) {
      const int64_t length = rows.raw_lengths[i].item<int64_t>();
      const torch::Tensor ids = rows.completion_ids[i].slice(0, 0, length).contiguous();
      drawn.completion_texts.push_back(tokenizer_->decode(
          std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length), /*skip_special_tokens=*/true));
    }
  return drawn;
}

// ---------------------------------------------------------------------------------------------------
// A generation rank resuming: the generations it had in flight, read back from its store and checked
// against the checkpoint, and the weights it samples with until the next push.
void Trainer::restore_generation_rank(const fs::path& checkpoint, const TrainerState& state) {
  if (state.async.generation_ranks == 0) return;  // a checkpoint without generation ranks: nothing in flight, weights at the first meeting
  const fs::path rank_file = checkpoint / str("rank-", runtime_.rank(), ".json");
  inputCheck(fs::exists(rank_file), checkpoint.string(), " has no ", rank_file.filename().string(),
             ": it was not taken by this run's generation ranks");
  const RankState rank_state = RankState::from_json(nlohmann::json::parse(read_text_file(rank_file)));
  inputCheck(rank_state.generation_rank, rank_file.string(), ": rank ", runtime_.rank(),
             " trained when the checkpoint was taken; resume with the same distributed.generation_ranks");
  const int64_t j = plan_->generator_index(runtime_.rank());
  const std::string dir = (output_dir_ / "rollouts" / "generated").string();
  for (const RankState::InFlight& f : rank_state.in_flight) {
    const std::string path = step_file_path(dir, j, f.step);
    const std::string bytes = fs::exists(path) ? read_text_file(path) : std::string();
    const std::string found = bytes.empty() ? "" : hex64(fnv1a64(bytes.data(), bytes.size()));
    inputCheck(found == f.file_hash, path, ": ",
               found.empty() ? std::string("missing")
                             : "damaged or replaced since the checkpoint (fnv1a64 " + found + ", the checkpoint recorded " +
                                   f.file_hash + ")",
               "; the generation in flight cannot be read back");
    in_flight_.push_back(read_rollouts(dir, f.step, j, config_hash_, tokenizer_->hash()));
  }
  // weights: those of the checkpoint, or the older ones the generation ranks kept (generator-weights.pt);
  // none when the first meeting sends new ones anyway
  if (plan_->push_due(state.optimizer_step, generators_version_)) {
    // sent at the first meeting
  } else if (generators_version_ == state.optimizer_step) {
    load_policy_weights(checkpoint);
  } else {
    std::vector<torch::Tensor> saved;
    torch::load(saved, (checkpoint / "generator-weights.pt").string());
    std::vector<torch::Tensor> mine = trainable_parameters(*policy_);
    runtimeCheck(saved.size() == mine.size(), checkpoint.string(), "/generator-weights.pt holds ", saved.size(),
                 " tensors, the policy trains ", mine.size());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < mine.size(); ++i) mine[i].copy_(saved[i]);
  }
  log_info(str("generation rank ", runtime_.rank(), " resumed from ", checkpoint.string(), " with ",
               in_flight_.size(), " generation(s) in flight"));
}

int64_t Trainer::last_generation_step() const {
  const int64_t last_micro = last_micro_step();
  if (last_micro <= segment_.micro_step) return segment_.generation_step - 1;
  return segment_.generation_step + (last_micro - 1 - segment_.micro_step) / micro_steps_per_cycle_;
}

}  // namespace rayless
