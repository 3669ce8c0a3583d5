// Attention for the packed layouts in length buckets. The packed passes scatter their tokens into a
// padded [B, T] grid for the attention only; one attention call over that grid computes every row as
// long as the longest, with the rest masked. At 256 completion tokens and lengths spread from a few to
// 256 that is several times the scores the real tokens need, and the CPU's flash attention computes
// masked scores as any others. Rows are sorted by length and cut into buckets, each attended as long
// as its own longest row: the same scores for every real token, fewer computed.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace rayless {

// Rows [first, first + count) of the rows sorted by length, attended as `length` query positions.
struct LengthBucket {
  int64_t first = 0, count = 0, length = 0;
};

// Cuts rows of the given query lengths (sorted ascending) into buckets that minimise
//   sum over buckets of (rows x heads x length x (past + length)) + call_cost x buckets,
// the attention scores computed plus a fixed cost per attention call in the same unit. Rows of length
// 0 (nothing to compute) belong to no bucket. Exact (dynamic programming over the sorted rows).
std::vector<LengthBucket> plan_length_buckets(const std::vector<int64_t>& sorted_lengths, int64_t past,
                                              int64_t heads, double call_cost);

// scaled_dot_product_attention over the packed tokens only, bucket by bucket.
// - q [N, H, D]: the packed tokens' queries, rotary embedding applied;
// - token_index [N]: their slots b * T + i in the padded [B, T] grid, as the packed passes number them;
// - k and v [B, H_kv, past + T, D] in the padded layout (the cache's), mask [B or 1, 1, T, past + T]
//   (true = attend) causal within the row: a query at slot i sees no key beyond past + i.
// Returns [N, H * D]: what one call on the padded grid gives at those slots (transposed to
// [B, T, H * D] and gathered), up to the order of floating-point sums inside the kernel.
torch::Tensor bucketed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& mask, const torch::Tensor& token_index, double scale,
                                 bool enable_gqa, double call_cost);

// The fixed cost per attention call used by the model, in attention scores (query x key x head): the
// calls and gathers of one bucket, measured on the CPU against the per-score cost of the kernel.
constexpr double kAttentionCallCost = 200000.0;

}  // namespace rayless
