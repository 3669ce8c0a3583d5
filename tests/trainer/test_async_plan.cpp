// Asynchronous GRPO's plan: which rows each generation rank samples, and when weights travel.
#include <catch2/catch.hpp>

#include "rayless/base/error.h"
#include "rayless/trainer/async_plan.h"

using namespace rayless;

namespace {
// whether a piece is its training rank's whole slice
bool whole_slice(const RowPiece& p, int64_t rows_per_rank) {
  return p.first == p.rank * rows_per_rank && p.last == (p.rank + 1) * rows_per_rank;
}

// every generation rank's pieces, in rank order: they must tile the generation's rows [0, T * n)
void check_tiles(const AsyncPlan& plan, int64_t rows_per_rank) {
  int64_t next = 0;
  for (int64_t j = 0; j < plan.generation_ranks(); ++j) {
    const auto pieces = plan.pieces(j);
    REQUIRE_FALSE(pieces.empty());
    for (const RowPiece& p : pieces) {
      CHECK(p.first == next);
      CHECK(p.size() >= 1);
      CHECK(p.first >= p.rank * rows_per_rank);  // within its training rank's slice
      CHECK(p.last <= (p.rank + 1) * rows_per_rank);
      next = p.last;
    }
  }
  CHECK(next == plan.training_ranks() * rows_per_rank);
}
}  // namespace

TEST_CASE("roles: the last K ranks generate") {
  const AsyncPlan plan(5, 2, 8, 4, 1, 1);
  CHECK(plan.training_ranks() == 3);
  CHECK_FALSE(plan.generates(2));
  CHECK(plan.generates(3));
  CHECK(plan.generator_index(4) == 1);
  CHECK(plan.describe() == "ranks 0-2 train, ranks 3-4 generate (grpo.async_lag = 1, weights every 1 step)");
  CHECK(AsyncPlan(2, 1, 8, 4, 0, 2).describe() == "rank 0 trains, rank 1 generates (grpo.async_lag = 0, weights every 2 steps)");
}

TEST_CASE("at most as many generation ranks as training ranks: whole slices of consecutive training ranks") {
  const AsyncPlan plan(5, 2, 8, 4, 0, 1);  // 3 training ranks, 2 generation ranks
  check_tiles(plan, 8);
  CHECK(plan.pieces(0).size() == 1);  // training rank 0
  CHECK(plan.pieces(1).size() == 2);  // training ranks 1, 2
  for (int64_t j = 0; j < 2; ++j)
    for (const RowPiece& p : plan.pieces(j)) CHECK(whole_slice(p, 8));
  const AsyncPlan one(3, 1, 8, 4, 0, 1);
  CHECK(one.pieces(0).size() == 2);
  check_tiles(one, 8);
}

TEST_CASE("more generation ranks than training ranks: a slice cut at group boundaries, else at rows") {
  const AsyncPlan by_groups(3, 2, 8, 4, 1, 1);  // 1 training rank, 8 rows = 2 groups of 4, 2 generation ranks
  check_tiles(by_groups, 8);
  CHECK(by_groups.pieces(0)[0].last == 4);
  CHECK_FALSE(whole_slice(by_groups.pieces(0)[0], 8));
  const AsyncPlan by_rows(4, 3, 4, 4, 1, 1);  // 1 training rank, one group of 4 rows, 3 generation ranks
  check_tiles(by_rows, 4);
  CHECK(by_rows.pieces(2)[0].size() == 2);
  const AsyncPlan uneven(5, 3, 6, 3, 0, 1);  // 2 training ranks, 3 generation ranks
  check_tiles(uneven, 6);
  CHECK_THROWS_AS(AsyncPlan(4, 3, 2, 1, 0, 1), RuntimeError);  // 3 generation ranks share a slice of 2 rows
}

TEST_CASE("weights travel at the first meeting at or after each multiple of weight_sync_steps") {
  const AsyncPlan every(3, 1, 8, 4, 1, 1);
  CHECK(every.push_due(0, -1));  // nothing held yet
  CHECK_FALSE(every.push_due(0, 0));
  CHECK(every.push_due(1, 0));
  const AsyncPlan third(3, 1, 8, 4, 1, 3);
  CHECK_FALSE(third.push_due(2, 0));
  CHECK(third.push_due(3, 0));
  CHECK(third.push_due(4, 2));  // a cycle of two steps passed 3
  CHECK_FALSE(third.push_due(5, 3));
  CHECK(third.push_due(6, 3));
}
