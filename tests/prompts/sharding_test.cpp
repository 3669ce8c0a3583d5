#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "rayless/base/error.h"
#include "rayless/prompts/sharding.h"

using namespace rayless;

TEST_CASE("epoch order reproduces torch.randperm draws from one seeded generator (TRL's RepeatSampler)") {
  // fixture: g = torch.Generator().manual_seed(42); torch.randperm(10, generator=g) three times
  CHECK(epoch_order(10, 42, 0) == std::vector<int64_t>{2, 6, 1, 8, 4, 5, 0, 9, 3, 7});
  CHECK(epoch_order(10, 42, 1) == std::vector<int64_t>{3, 5, 8, 9, 4, 6, 1, 0, 7, 2});
  CHECK(epoch_order(10, 42, 2) == std::vector<int64_t>{7, 5, 0, 3, 1, 6, 9, 8, 4, 2});
  // going back to an earlier epoch replays the draws
  CHECK(epoch_order(10, 42, 1) == std::vector<int64_t>{3, 5, 8, 9, 4, 6, 1, 0, 7, 2});
  auto big = epoch_order(1000, 7, 0);
  CHECK(std::vector<int64_t>(big.begin(), big.begin() + 8) == std::vector<int64_t>{615, 284, 599, 580, 347, 92, 383, 891});
  CHECK(epoch_order(4, 1, 3, false) == std::vector<int64_t>{0, 1, 2, 3});
}

TEST_CASE("shards are disjoint across ranks, cover each epoch and are deterministic") {
  for (bool drop : {true, false}) {
    for (int world : {1, 2, 3, 4}) {
      ShardSpec spec;
      spec.num_prompts = 24;
      spec.prompts_per_rank = 2;
      spec.world_size = world;
      spec.seed = 5;
      spec.drop_incomplete = drop;
      const int64_t global = spec.prompts_per_rank * world;
      const int64_t steps_per_epoch = spec.num_prompts / global;  // 24 is divisible by 2, 4, 6, 8
      ShardCursor cursor;
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::multiset<int64_t> seen;
        for (int64_t s = 0; s < steps_per_epoch; ++s) {
          const int64_t step = epoch * steps_per_epoch + s;
          CHECK(cursor_at_step(spec, step) == cursor);
          std::set<int64_t> this_step;
          ShardCursor next;
          for (int r = 0; r < world; ++r) {
            PromptShard shard = shard_prompts(spec, r, cursor);
            REQUIRE(shard.rows.size() == 2u);
            CHECK(shard.cursor.epoch == epoch);
            for (int64_t row : shard.rows) {
              CHECK(this_step.insert(row).second);  // disjoint across ranks
              seen.insert(row);
            }
            if (r > 0) CHECK(shard.next == next);  // every rank agrees on the next cursor
            next = shard.next;
            CHECK(shard_prompts(spec, r, cursor).rows == shard.rows);  // deterministic
          }
          cursor = next;
        }
        // every prompt exactly once per epoch
        REQUIRE(seen.size() == 24u);
        CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 24u);
      }
    }
  }
}

TEST_CASE("rank r takes the r-th slice of the global batch in the epoch's order") {
  ShardSpec spec{10, 2, 2, 42, true, true};
  auto order = epoch_order(10, 42, 0);
  CHECK(shard_prompts(spec, 0, {}).rows == std::vector<int64_t>{order[0], order[1]});
  CHECK(shard_prompts(spec, 1, {}).rows == std::vector<int64_t>{order[2], order[3]});
  // 10 prompts, batches of 4: the third batch would not be full and is dropped (TRL); next epoch
  PromptShard second = shard_prompts(spec, 0, {0, 4});
  CHECK(second.next == ShardCursor{1, 0});
  auto order1 = epoch_order(10, 42, 1);
  CHECK(shard_prompts(spec, 1, second.next).rows == std::vector<int64_t>{order1[2], order1[3]});
  CHECK(cursor_at_step(spec, 2) == ShardCursor{1, 0});
}

TEST_CASE("without drop_incomplete a batch continues into the next epoch") {
  ShardSpec spec{10, 2, 2, 42, true, false};
  auto e0 = epoch_order(10, 42, 0), e1 = epoch_order(10, 42, 1);
  PromptShard third0 = shard_prompts(spec, 0, {0, 8});
  PromptShard third1 = shard_prompts(spec, 1, {0, 8});
  CHECK(third0.rows == std::vector<int64_t>{e0[8], e0[9]});
  CHECK(third1.rows == std::vector<int64_t>{e1[0], e1[1]});
  CHECK(third1.next == ShardCursor{1, 2});
  CHECK(cursor_at_step(spec, 3) == ShardCursor{1, 2});
}

TEST_CASE("sharding rejects a dataset smaller than one global batch") {
  ShardSpec spec{3, 2, 2, 1, true, true};
  CHECK_THROWS_AS(shard_prompts(spec, 0, {}), InputError);
  spec.num_prompts = 0;
  CHECK_THROWS_AS(shard_prompts(spec, 0, {}), InputError);
}

TEST_CASE("advance_cursor walks as shard_prompts does, also when the global batch changes between steps") {
  for (bool drop : {true, false}) {
    // the global batch of each step, as in a run resumed at other world sizes
    const std::vector<int64_t> batches = {6, 6, 6, 4, 2, 4, 6, 6, 2, 4, 4, 6, 2};
    ShardCursor walked;
    std::vector<int64_t> drawn;
    for (int64_t batch : batches) {
      ShardSpec spec{24, batch, 1, 3, true, drop};
      const PromptShard shard = shard_prompts(spec, 0, walked);
      drawn.insert(drawn.end(), shard.rows.begin(), shard.rows.end());
      walked = advance_cursor(spec, walked, 1);
    }
    // the prompts drawn are the epochs' orders, one after the other: no prompt twice, none skipped,
    // except with drop_incomplete a tail too short for the next batch
    std::vector<int64_t> expected;
    for (int64_t e = 0; e < 3; ++e) {
      const auto order = epoch_order(24, 3, e);
      expected.insert(expected.end(), order.begin(), order.end());
    }
    // epoch 0: 6+6+6+4 leaves 2, which the batch of 2 takes; epoch 1: 4+6+6+2+4 leaves 2, too few for 4
    if (drop) expected.erase(expected.begin() + 46, expected.begin() + 48);
    expected.resize(drawn.size());
    CHECK(drawn == expected);
  }
  // many steps at once equal one step at a time, from any cursor
  for (bool drop : {true, false}) {
    ShardSpec spec{10, 3, 1, 42, true, drop};
    for (int64_t offset : {0, 3, 7, 9}) {
      ShardCursor one_by_one = advance_cursor(spec, {2, offset}, 0);
      for (int64_t n = 0; n < 12; ++n) {
        CHECK(advance_cursor(spec, {2, offset}, n) == one_by_one);
        one_by_one = advance_cursor(spec, one_by_one, 1);
      }
    }
  }
  CHECK_THROWS_AS(advance_cursor(ShardSpec{10, 2, 1, 1, true, true}, {0, 11}, 1), InputError);
}
