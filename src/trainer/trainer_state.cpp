#include "rayless/trainer/trainer_state.h"

#include "rayless/base/error.h"

namespace rayless {

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j;
  j["optimizer_step"] = optimizer_step;
  j["micro_step"] = micro_step;
  j["num_tokens"] = num_tokens;
  j["world_size"] = world_size;
  j["config_hash"] = config_hash;
  j["tokenizer_hash"] = tokenizer_hash;
  j["seed"] = seed;
  j["data_cursor"] = {{"epoch", data_cursor.epoch}, {"offset", data_cursor.offset}};
  j["generation_step"] = generation_step;
  j["position_in_cycle"] = {{"iteration", iteration}, {"micro_batch", micro_batch}};
  j["num_prompts"] = num_prompts;
  j["nonfinite_steps"] = nonfinite_steps;
  j["nonfinite_in_a_row"] = nonfinite_in_a_row;
  j["segment_start"] = {{"micro_step", segment.micro_step},
                        {"optimizer_step", segment.optimizer_step},
                        {"generation_step", segment.generation_step},
                        {"data_cursor", {{"epoch", segment.data_cursor.epoch}, {"offset", segment.data_cursor.offset}}}};
  if (async.generation_ranks > 0)
    j["async"] = {{"generation_ranks", async.generation_ranks},
                  {"async_lag", async.async_lag},
                  {"generators_version", async.generators_version}};
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j, const std::string& where) {
  TrainerState s;
  try {
    s.optimizer_step = j.at("optimizer_step").get<int64_t>();
    s.micro_step = j.at("micro_step").get<int64_t>();
    s.num_tokens = j.at("num_tokens").get<int64_t>();
    s.world_size = j.at("world_size").get<int64_t>();
    s.config_hash = j.at("config_hash").get<std::string>();
    s.tokenizer_hash = j.value("tokenizer_hash", "");
    s.seed = j.value("seed", int64_t{0});
    if (j.contains("data_cursor"))
      s.data_cursor = {j["data_cursor"].value("epoch", int64_t{0}), j["data_cursor"].value("offset", int64_t{0})};
    s.generation_step = j.value("generation_step", int64_t{0});
    if (j.contains("position_in_cycle")) {
      s.iteration = j["position_in_cycle"].value("iteration", int64_t{0});
      s.micro_batch = j["position_in_cycle"].value("micro_batch", int64_t{0});
    }
    s.num_prompts = j.value("num_prompts", int64_t{0});
    s.nonfinite_steps = j.value("nonfinite_steps", int64_t{0});
    s.nonfinite_in_a_row = j.value("nonfinite_in_a_row", int64_t{0});
    if (j.contains("segment_start")) {  // checkpoints from before segments: the run began at 0
      const nlohmann::json& g = j["segment_start"];
      s.segment.micro_step = g.at("micro_step").get<int64_t>();
      s.segment.optimizer_step = g.at("optimizer_step").get<int64_t>();
      s.segment.generation_step = g.at("generation_step").get<int64_t>();
      s.segment.data_cursor = {g.at("data_cursor").at("epoch").get<int64_t>(), g.at("data_cursor").at("offset").get<int64_t>()};
    }
    if (j.contains("async")) {
      s.async.generation_ranks = j["async"].at("generation_ranks").get<int64_t>();
      s.async.async_lag = j["async"].at("async_lag").get<int64_t>();
      s.async.generators_version = j["async"].at("generators_version").get<int64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(where, ": not a rayless trainer state (", e.what(), ")"));
  }
  return s;
}

void TrainerState::check_resumable(const std::string& where, int64_t world, bool mid_accumulation, int64_t max_steps,
                                   const AsyncState& now) const {
  inputCheck(async.generation_ranks == 0 ||
                 (world_size == world && now.generation_ranks == async.generation_ranks && now.async_lag == async.async_lag),
             where, " was taken by ", world_size, " ranks with distributed.generation_ranks = ", async.generation_ranks,
             " and grpo.async_lag = ", async.async_lag,
             " (generations in flight live on the generation ranks): resume it with the same (now ", world,
             " ranks, generation_ranks = ", now.generation_ranks, ", async_lag = ", now.async_lag, ")");
  inputCheck(world_size == world || (!mid_cycle() && !mid_accumulation), where, " was taken by ", world_size,
             " ranks in the middle of a generation cycle; resume it with ", world_size, " ranks (now ", world, ")");
  inputCheck(optimizer_step < max_steps || (optimizer_step == max_steps && !mid_accumulation), where, " is at step ",
             optimizer_step, ", beyond train.max_steps = ", max_steps);
}

nlohmann::json RankState::to_json(int64_t seed) const {
  nlohmann::json j;
  j["rank"] = rank;
  j["random_streams"] = {{"seed", seed},
                         {"derivation", "fnv1a64(seed/rank/generation_step/purpose), purposes: sample, shuffle"}};
  j["has_accumulated_gradients"] = has_accumulated_gradients;
  j["step_loss_float32"] = step_loss_float32;
  if (!generation_file_hash.empty()) j["generation_file_hash"] = generation_file_hash;
  j["zero_stage"] = zero_stage;
  if (generation_rank) {
    j["generation_rank"] = true;
    nlohmann::json flying = nlohmann::json::array();
    for (const InFlight& f : in_flight)
      flying.push_back({{"step", f.step}, {"policy_version", f.policy_version}, {"file_hash", f.file_hash}});
    j["in_flight"] = flying;
  }
  return j;
}

RankState RankState::from_json(const nlohmann::json& j) {
  RankState s;
  s.rank = j.value("rank", int64_t{0});
  s.has_accumulated_gradients = j.value("has_accumulated_gradients", false);
  s.step_loss_float32 = j.value("step_loss_float32", 0.0f);
  s.generation_file_hash = j.value("generation_file_hash", std::string());
  s.zero_stage = j.value("zero_stage", int64_t{0});
  s.generation_rank = j.value("generation_rank", false);
  if (j.contains("in_flight") && j["in_flight"].is_array())
    for (const auto& f : j["in_flight"])
      s.in_flight.push_back({f.value("step", int64_t{0}), f.value("policy_version", int64_t{-1}),
                             f.value("file_hash", std::string())});
  return s;
}

}  // namespace rayless
