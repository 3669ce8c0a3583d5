#include "rayless/prompts/sharding.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <memory>
#include <mutex>

#include "rayless/base/error.h"

namespace rayless {

std::shared_ptr<const std::vector<int64_t>> epoch_permutation(int64_t num_prompts, uint64_t seed, int64_t epoch) {
  // one generator per (seed), one draw per epoch: remember the last epoch so that consecutive
  // steps do not replay all earlier draws
  static std::mutex mutex;
  static struct {
    bool valid = false;
    uint64_t seed = 0;
    int64_t n = 0, epoch = -1;
    at::Generator generator;
    std::shared_ptr<std::vector<int64_t>> order;
  } memo;
  std::lock_guard<std::mutex> lock(mutex);
  if (!memo.valid || memo.seed != seed || memo.n != num_prompts || memo.epoch > epoch) {
    memo.valid = true;
    memo.seed = seed;
    memo.n = num_prompts;
    memo.epoch = -1;
    memo.generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    memo.order.reset();
  }
  while (memo.epoch < epoch) {
    // drawn in place (8 bytes a prompt, no second copy); a new buffer only while a caller still
    // holds the previous epoch's
    if (!memo.order || memo.order.use_count() > 1) memo.order = std::make_shared<std::vector<int64_t>>(num_prompts);
    torch::Tensor perm = torch::from_blob(memo.order->data(), {num_prompts}, torch::kInt64);
    torch::randperm_out(perm, num_prompts, memo.generator);
    ++memo.epoch;
  }
  return memo.order;
}

std::vector<int64_t> epoch_order(int64_t num_prompts, uint64_t seed, int64_t epoch, bool shuffle) {
  if (shuffle) return *epoch_permutation(num_prompts, seed, epoch);
  std::vector<int64_t> order(num_prompts);
  for (int64_t i = 0; i < num_prompts; ++i) order[i] = i;
  return order;
}

namespace {
void check_spec(const ShardSpec& spec) {
  inputCheck(spec.num_prompts > 0, "data: the dataset has no prompts");
  inputCheck(spec.prompts_per_rank > 0 && spec.world_size > 0, "sharding: prompts_per_rank and world_size must be positive");
  const int64_t global = spec.prompts_per_rank * spec.world_size;
  inputCheck(!spec.drop_incomplete || global <= spec.num_prompts, "data: the dataset has ", spec.num_prompts,
             " prompts but one generation step needs ", global, " (", spec.prompts_per_rank, " per rank x ",
             spec.world_size, " ranks)");
}

// With drop_incomplete, a cursor whose batch would not fit in the epoch moves to the next epoch.
ShardCursor normalise(const ShardSpec& spec, ShardCursor cursor) {
  const int64_t global = spec.prompts_per_rank * spec.world_size;
  if (spec.drop_incomplete ? cursor.offset + global > spec.num_prompts : cursor.offset >= spec.num_prompts) {
    cursor.epoch += 1;
    cursor.offset = 0;
  }
  return cursor;
}
}  // namespace

PromptShard shard_prompts(const ShardSpec& spec, int rank, ShardCursor cursor) {
  check_spec(spec);
  inputCheck(rank >= 0 && rank < spec.world_size, "sharding: rank ", rank, " outside world size ", spec.world_size);
  inputCheck(cursor.epoch >= 0 && cursor.offset >= 0 && cursor.offset <= spec.num_prompts,
             "sharding: invalid cursor (epoch ", cursor.epoch, ", offset ", cursor.offset, ")");
  const int64_t global = spec.prompts_per_rank * spec.world_size;
  PromptShard shard;
  shard.cursor = normalise(spec, cursor);
  // walk the global batch; this rank's slice is [rank * P, (rank + 1) * P) of it
  ShardCursor at = shard.cursor;
  // the epoch's permutation is shared, not copied (without shuffle, none: the identity)
  auto order_of = [&](int64_t epoch) {
    return spec.shuffle ? epoch_permutation(spec.num_prompts, spec.seed, epoch) : nullptr;
  };
  std::shared_ptr<const std::vector<int64_t>> order = order_of(at.epoch);
  const int64_t first = int64_t{rank} * spec.prompts_per_rank;
  for (int64_t i = 0; i < global; ++i) {
    if (at.offset == spec.num_prompts) {  // only without drop_incomplete: continue in the next epoch
      at = {at.epoch + 1, 0};
      order = order_of(at.epoch);
    }
    if (i >= first && i < first + spec.prompts_per_rank)
      shard.rows.push_back(order ? (*order)[static_cast<size_t>(at.offset)] : at.offset);
    ++at.offset;
  }
  shard.next = normalise(spec, at);
  return shard;
}

ShardCursor advance_cursor(const ShardSpec& spec, ShardCursor from, int64_t steps) {
  check_spec(spec);
  inputCheck(steps >= 0, "sharding: negative step count ", steps);
  inputCheck(from.epoch >= 0 && from.offset >= 0 && from.offset <= spec.num_prompts, "sharding: invalid cursor (epoch ",
             from.epoch, ", offset ", from.offset, ") for ", spec.num_prompts, " prompts");
  if (steps == 0) return from;
  const int64_t global = spec.prompts_per_rank * spec.world_size;
  if (!spec.drop_incomplete) {  // one stream of prompts across epochs
    const int64_t consumed = from.epoch * spec.num_prompts + from.offset + steps * global;
    return {consumed / spec.num_prompts, consumed % spec.num_prompts};
  }
  // the batches that still fit in this epoch, then whole epochs; the result is where the last batch
  // ended, so that the next batch (perhaps a smaller one, after a resume) may still use the tail
  const ShardCursor start = normalise(spec, from);
  const int64_t left_in_epoch = (spec.num_prompts - start.offset) / global;
  if (steps <= left_in_epoch) return {start.epoch, start.offset + steps * global};
  const int64_t per_epoch = spec.num_prompts / global, later = steps - left_in_epoch - 1;
  return {start.epoch + 1 + later / per_epoch, (later % per_epoch + 1) * global};
}

ShardCursor cursor_at_step(const ShardSpec& spec, int64_t step) {
  inputCheck(step >= 0, "sharding: negative step ", step);
  return normalise(spec, advance_cursor(spec, {}, step));
}

}  // namespace rayless
