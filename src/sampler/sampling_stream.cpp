// The counter-based sampling stream (sampling_stream.h).
#include "rayless/sampler/sampling_stream.h"

#include "rayless/base/error.h"
#include "rayless/base/hash.h"

namespace rayless {

namespace {
// splitmix64's output function: a bijection of 64-bit words whose outputs pass the usual statistical
// batteries even for consecutive inputs, which is what a counter-based stream needs.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
}  // namespace

int64_t SamplingStream::global_row(int64_t local_row) const {
  if (rows.empty()) return first_row + local_row;
  runtimeCheck(local_row >= 0 && local_row < static_cast<int64_t>(rows.size()), "sampling stream: row ", local_row,
               " of ", rows.size());
  return rows[static_cast<size_t>(local_row)];
}

SamplingStream sampling_stream(int64_t seed, int64_t step, const std::string& purpose, int64_t first_row) {
  const std::string key = str(seed, "/", step, "/", purpose);
  return SamplingStream(fnv1a64(key.data(), key.size()), first_row);
}

SamplingStream continuation_stream(const SamplingStream& stream, int64_t turn, const std::vector<size_t>& rows) {
  SamplingStream next(mix64(stream.key ^ mix64(0x7475726eULL + static_cast<uint64_t>(turn))));  // "turn"
  for (size_t row : rows) next.rows.push_back(stream.global_row(static_cast<int64_t>(row)));
  return next;
}

float sampling_uniform(uint64_t key, int64_t global_row, int64_t position) {
  const uint64_t row_key = mix64(key ^ mix64(static_cast<uint64_t>(global_row)));
  const uint64_t bits = mix64(row_key + static_cast<uint64_t>(position));
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // 24 bits: [0, 1 - 2^-24]
}

torch::Tensor sampling_uniforms(const SamplingStream& stream, int64_t rows, int64_t tokens) {
  auto table = torch::empty({rows, tokens}, torch::kFloat32);
  auto a = table.accessor<float, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t global = stream.global_row(r);
    for (int64_t t = 0; t < tokens; ++t) a[r][t] = sampling_uniform(stream.key, global, t);
  }
  return table;
}

torch::Tensor sample_inverse_cdf(const torch::Tensor& probs, const torch::Tensor& uniforms) {
  const int64_t vocab = probs.size(-1);
  const auto cdf = probs.cumsum(-1);
  const auto target = uniforms.view({-1, 1}).to(cdf.scalar_type()) * cdf.narrow(-1, vocab - 1, 1);
  const auto index = torch::searchsorted(cdf, target, /*out_int32=*/false, /*right=*/true).squeeze(-1);
  // the last token of positive probability: where rounding puts the target at (or past) the total
  const auto last_positive = (vocab - 1) - (probs > 0).flip(-1).to(torch::kFloat32).argmax(-1);
  return torch::minimum(index, last_positive);
}

}  // namespace rayless
