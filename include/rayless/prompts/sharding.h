// Prompt sharding: each generation step takes one global batch of prompts,
// world_size * prompts_per_rank of them, from the epoch's shuffled order; rank r takes the r-th
// contiguous slice, so all generations of a prompt (a group) stay on the rank that holds the prompt.
// A pure function of its arguments: the cursor (epoch, offset) is what a checkpoint stores.
//
// The order of epoch e is TRL's RepeatSampler's: a torch CPU generator seeded once with `seed`, one
// torch.randperm(num_prompts) draw per epoch (epoch e = draw e + 1), and, as there, a last batch
// that would not be full is dropped (drop_incomplete = true) — or, with drop_incomplete = false, the
// batch continues into the next epoch's order so every prompt of every epoch is used.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace rayless {

struct ShardCursor {
  int64_t epoch = 0;
  int64_t offset = 0;  // position in the epoch's order where the next global batch starts
  bool operator==(const ShardCursor& other) const { return epoch == other.epoch && offset == other.offset; }
};

struct PromptShard {
  std::vector<int64_t> rows;  // dataset row indices for this rank, prompts_per_rank of them
  ShardCursor cursor;         // where this batch started (after skipping an incomplete tail)
  ShardCursor next;           // where the next global batch starts
};

struct ShardSpec {
  int64_t num_prompts = 0;
  int64_t prompts_per_rank = 1;
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_incomplete = true;
};

// InputError when the dataset is empty or smaller than one global batch (with drop_incomplete).
PromptShard shard_prompts(const ShardSpec& spec, int rank, ShardCursor cursor);

// Where the last of `steps` global batches drawn from `from` ends (`from` itself for 0 steps). Each
// batch starts where the previous one ended, or, with drop_incomplete, in the next epoch when it no
// longer fits. This position, not the step number, is what carries over a resume: a run resumed
// with another global batch (another world size under TRL's per-device batch sizes) continues the
// epoch's order where the checkpoint stopped, and a smaller batch still uses a tail a larger one
// could not.
ShardCursor advance_cursor(const ShardSpec& spec, ShardCursor from, int64_t steps);

// The cursor at the start of generation step `step` (0-based) of a run that never changed its batch.
ShardCursor cursor_at_step(const ShardSpec& spec, int64_t step);

// The order of one epoch: a permutation of 0..num_prompts-1 (identity when shuffle is off).
std::vector<int64_t> epoch_order(int64_t num_prompts, uint64_t seed, int64_t epoch, bool shuffle = true);
// The shuffled order of one epoch without a copy: shared and immutable (8 bytes a prompt, the one
// memory a rank spends per row of the dataset).
std::shared_ptr<const std::vector<int64_t>> epoch_permutation(int64_t num_prompts, uint64_t seed, int64_t epoch);

}  // namespace rayless
