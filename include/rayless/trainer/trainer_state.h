// What a checkpoint records about progress (trainer_state.json on rank 0, rank-R.json per rank), as
// structs that convert themselves to and from JSON and check whether they can resume a run.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "rayless/prompts/sharding.h"

namespace rayless {

// Where a segment of a run began: the run's start, or a resume at a generation-cycle and optimizer-step
// boundary, where the batch geometry (world size, steps per generation, accumulation) may change.
// Step numbers continue across segments; within a segment, cycles and optimizer steps count from here.
struct SegmentStart {
  int64_t micro_step = 0;
  int64_t optimizer_step = 0;
  int64_t generation_step = 0;
  ShardCursor data_cursor;  // where generation `generation_step` draws its prompts from
};

// Asynchronous GRPO's roles when the checkpoint was taken (generation_ranks = 0: none).
struct AsyncState {
  int64_t generation_ranks = 0;
  int64_t async_lag = 0;
  int64_t generators_version = -1;  // the policy version the generation ranks held (-1: none)
};

struct TrainerState {
  int64_t optimizer_step = 0;  // completed optimizer steps
  int64_t micro_step = 0;      // completed micro-steps
  int64_t num_tokens = 0;      // prompt + completion tokens seen, all ranks (TRL's num_tokens)
  int64_t world_size = 1;
  int64_t seed = 0;
  std::string config_hash;
  std::string tokenizer_hash;
  // where the data and the generation cycle stand: generation `generation_step` (the one in progress,
  // or the next at a cycle boundary) draws its prompts from data_cursor, an (epoch, offset) in the
  // epochs' order that does not depend on the batch size, so any world size continues from it
  ShardCursor data_cursor;
  int64_t generation_step = 0;
  int64_t iteration = 0;    // μ pass within the cycle
  int64_t micro_batch = 0;  // micro-batch within the pass
  int64_t num_prompts = 0;  // rows of data.path the run drew from (0: not recorded)
  SegmentStart segment;     // where the segment that took this checkpoint began
  AsyncState async;
  int64_t nonfinite_steps = 0;     // optimizer steps the non-finite guard left out, in all
  int64_t nonfinite_in_a_row = 0;  // of them, in a row up to this checkpoint

  bool mid_cycle() const { return iteration != 0 || micro_batch != 0; }

  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& json, const std::string& where);
  // InputError naming `where` when this state cannot resume here: another world size in the middle of
  // a generation cycle or accumulation, a step beyond max_steps, or (a checkpoint with generation
  // ranks, whose generations in flight live on them) other roles: generation_ranks and async_lag.
  void check_resumable(const std::string& where, int64_t world_size, bool mid_accumulation, int64_t max_steps,
                       const AsyncState& now = {}) const;
};

struct RankState {
  int64_t rank = 0;
  bool has_accumulated_gradients = false;  // a checkpoint between optimizer steps keeps them
  float step_loss_float32 = 0.0f;          // the logged loss's running total within the step
  // mid-cycle checkpoints: fnv1a64 of this rank's stored generation file, checked before it is
  // read back on resume, so a damaged or replaced file is refused ("" = not recorded)
  std::string generation_file_hash;
  // distributed.zero_stage of the run: at stage 2 the saved accumulated gradients are this rank's
  // slices (zero_optimizer.h), at stages 0 and 1 whole tensors
  int64_t zero_stage = 0;
  // a generation rank: the generations it had sampled and stored but not yet handed over, with
  // fnv1a64 of each stored file (read back, checked, on resume)
  struct InFlight {
    int64_t step = 0;
    int64_t policy_version = -1;
    std::string file_hash;
  };
  bool generation_rank = false;
  std::vector<InFlight> in_flight;
  nlohmann::json to_json(int64_t seed) const;
  static RankState from_json(const nlohmann::json& json);
};

}  // namespace rayless
