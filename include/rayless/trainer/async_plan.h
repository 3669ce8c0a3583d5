// Asynchronous GRPO's roles and schedule (distributed.generation_ranks = K > 0, docs/distributed.md):
// the first world_size - K ranks train (data parallel among themselves), the last K only generate and
// score. Everything here is arithmetic on the config, the same on every rank, so each rank knows
// without asking what every other rank does:
//   - which global rows of a generation each generation rank samples (its share: contiguous, in rank
//     order, so the shares joined in rank order are the generation in TRL's row order);
//   - when new weights go from the training ranks to the generation ranks (grpo.weight_sync_steps).
// The lag itself (grpo.async_lag = L) is a schedule, not a number anyone checks: the generation ranks
// sample generation g + L right after they hand generation g over, with the weights they got at that
// same meeting, so generation g is sampled by the policy trained up to the start of generation g - L.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace rayless {

// Global rows [first, last) of one generation, all of them rows of training rank `rank` (whose slice
// of the generation is rows [rank * n, (rank + 1) * n)).
struct RowPiece {
  int64_t rank = 0;
  int64_t first = 0, last = 0;
  int64_t size() const { return last - first; }
};

class AsyncPlan {
 public:
  // world_size ranks in all, generation_ranks of them generating (>= 1, < world_size); rows_per_rank =
  // completions of one generation per training rank; num_generations = G (pieces keep whole groups
  // where a rank's slice can be cut at group boundaries).
  AsyncPlan(int64_t world_size, int64_t generation_ranks, int64_t rows_per_rank, int64_t num_generations,
            int64_t async_lag, int64_t weight_sync_steps);

  int64_t training_ranks() const { return training_ranks_; }
  int64_t generation_ranks() const { return generation_ranks_; }
  int64_t lag() const { return lag_; }
  bool generates(int64_t world_rank) const { return world_rank >= training_ranks_; }
  int64_t generator_index(int64_t world_rank) const { return world_rank - training_ranks_; }

  // What generation rank j (0-based) samples of every generation: when there are at most as many
  // generation ranks as training ranks, the whole slices of consecutive training ranks (sampled as
  // that rank would sample them in a synchronous run); with more, a training rank's slice is cut into
  // consecutive pieces for several generation ranks.
  std::vector<RowPiece> pieces(int64_t generator) const;

  // Whether the weights of policy version `version` (optimizer steps done) go to the generation ranks
  // at a meeting, given the version they hold (-1: none yet): at the first meeting at or after each
  // multiple of weight_sync_steps.
  bool push_due(int64_t version, int64_t held_version) const;

  // "ranks 0-2 train, ranks 3-4 generate (lag 1)"
  std::string describe() const;

 private:
  int64_t training_ranks_, generation_ranks_, rows_per_rank_, num_generations_, lag_, weight_sync_steps_;
};

}  // namespace rayless
