#include "rayless/trainer/async_plan.h"

#include "rayless/base/error.h"

namespace rayless {

AsyncPlan::AsyncPlan(int64_t world_size, int64_t generation_ranks, int64_t rows_per_rank, int64_t num_generations,
                     int64_t async_lag, int64_t weight_sync_steps)
    : training_ranks_(world_size - generation_ranks),
      generation_ranks_(generation_ranks),
      rows_per_rank_(rows_per_rank),
      num_generations_(num_generations),
      lag_(async_lag),
      weight_sync_steps_(weight_sync_steps) {
  runtimeCheck(generation_ranks_ >= 1 && training_ranks_ >= 1 && rows_per_rank_ >= 1 && weight_sync_steps_ >= 1 &&
                   lag_ >= 0 && rows_per_rank_ >= (generation_ranks_ + training_ranks_ - 1) / training_ranks_,
               "async plan: ", generation_ranks_, " generation rank(s) of ", world_size, ", ", rows_per_rank_,
               " rows per training rank, lag ", lag_, ", weight_sync_steps ", weight_sync_steps_);
}

std::vector<RowPiece> AsyncPlan::pieces(int64_t j) const {
  const int64_t T = training_ranks_, K = generation_ranks_, n = rows_per_rank_;
  std::vector<RowPiece> out;
  if (K <= T) {
    // generation rank j takes training ranks [jT/K, (j+1)T/K): whole slices
    for (int64_t t = j * T / K; t < (j + 1) * T / K; ++t) out.push_back({t, t * n, (t + 1) * n});
    return out;
  }
  // more generation ranks than training ranks: rank t's slice goes to the generation ranks j with
  // jT/K == t, cut into nearly equal consecutive pieces, at group boundaries when there are enough groups
  const int64_t t = j * T / K;
  int64_t first_j = j, last_j = j;
  while (first_j > 0 && (first_j - 1) * T / K == t) --first_j;
  while (last_j + 1 < K && (last_j + 1) * T / K == t) ++last_j;
  const int64_t parts = last_j - first_j + 1, i = j - first_j;
  const int64_t G = num_generations_;
  const bool by_groups = n % G == 0 && n / G >= parts && (t * n) % G == 0;
  const int64_t unit = by_groups ? G : 1, units = n / unit;
  out.push_back({t, t * n + unit * (i * units / parts), t * n + unit * ((i + 1) * units / parts)});
  return out;
}

bool AsyncPlan::push_due(int64_t version, int64_t held_version) const {
  if (held_version < 0) return true;
  return version != held_version && version / weight_sync_steps_ > held_version / weight_sync_steps_;
}

std::string AsyncPlan::describe() const {
  auto ranks = [](int64_t a, int64_t b, const char* verb) {
    return a == b ? str("rank ", a, " ", verb, "s") : str("ranks ", a, "-", b, " ", verb);
  };
  return str(ranks(0, training_ranks_ - 1, "train"), ", ",
             ranks(training_ranks_, training_ranks_ + generation_ranks_ - 1, "generate"), " (grpo.async_lag = ", lag_,
             ", weights every ", weight_sync_steps_, " step", weight_sync_steps_ == 1 ? "" : "s", ")");
}

}  // namespace rayless
