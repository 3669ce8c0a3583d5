// Sampling randomness that belongs to a row, not to a batch. Every sampled token draws one uniform
// number that is a pure function of (stream key, global row index, token position): a counter-based
// stream (splitmix64 of the three), so a row's tokens do not depend on which slot, rank or batch runs
// it, on the order rows are admitted (continuous batching), on how often the host looks at the device,
// or on graph capture. The table of a generation's uniforms is drawn on the host once and uploaded
// once; a token is then picked on the device by inverse-CDF sampling: the first token whose cumulative
// processed probability exceeds u times the total.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rayless {

struct SamplingStream {
  uint64_t key = 0;
  int64_t first_row = 0;      // global index of output row 0 (rows then follow in order)
  std::vector<int64_t> rows;  // or each output row's global index (overrides first_row when not empty)

  SamplingStream() = default;
  explicit SamplingStream(uint64_t key_, int64_t first_row_ = 0) : key(key_), first_row(first_row_) {}
  int64_t global_row(int64_t local_row) const;
};

// The stream of one purpose ("sample", "eval") at one step of a run: key = FNV-1a of
// "seed/step/purpose". No rank in the key: rows are told apart by their global index.
SamplingStream sampling_stream(int64_t seed, int64_t step, const std::string& purpose, int64_t first_row = 0);

// The stream of a later turn of conversations (tool calls): a key of its own per turn (1, 2, ...),
// and for each continuing row (rows[k], a local row of `stream`) its global row.
SamplingStream continuation_stream(const SamplingStream& stream, int64_t turn, const std::vector<size_t>& rows);

// The uniform number of (key, global row, token position), in [0, 1) with 24 random bits (exact in float32).
float sampling_uniform(uint64_t key, int64_t global_row, int64_t position);
// The table [rows, tokens] (float32, CPU): row i holds the uniforms of the stream's global row i.
torch::Tensor sampling_uniforms(const SamplingStream& stream, int64_t rows, int64_t tokens);

// Inverse-CDF sampling: probs [B, V] (non-negative rows; need not sum to 1 exactly), uniforms [B] in
// [0, 1) -> [B] int64, the first index whose cumulative probability exceeds u times the row's total. A
// token of probability 0 is never picked (rounding that puts the target at the total falls back on the
// last token of positive probability). Any device, fixed shapes, no host synchronisation.
torch::Tensor sample_inverse_cdf(const torch::Tensor& probs, const torch::Tensor& uniforms);

}  // namespace rayless
