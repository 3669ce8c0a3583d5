// The counter-based sampling stream and inverse-CDF sampling (sampling_stream.h).
#include <catch2/catch.hpp>

#include <cmath>

#include "rayless/sampler/sampling_stream.h"

using namespace rayless;

TEST_CASE("sampling uniforms are a function of (key, global row, position) alone") {
  const SamplingStream whole(1234);
  const auto table = sampling_uniforms(whole, 8, 16);
  // the rows of a later slice of the batch are the same rows of the whole table
  const auto slice = sampling_uniforms(SamplingStream(1234, 5), 3, 16);
  CHECK(torch::equal(slice, table.narrow(0, 5, 3)));
  SamplingStream listed(1234);
  listed.rows = {7, 0};
  const auto picked = sampling_uniforms(listed, 2, 16);
  CHECK(torch::equal(picked[0], table[7]));
  CHECK(torch::equal(picked[1], table[0]));
  // a longer table extends the rows without changing them
  CHECK(torch::equal(sampling_uniforms(whole, 8, 20).narrow(1, 0, 16), table));
  CHECK(table[2][3].item<float>() == sampling_uniform(1234, 2, 3));
  // another key, another table
  CHECK_FALSE(torch::equal(sampling_uniforms(SamplingStream(1235), 8, 16), table));
  // the trainer's streams: one per (seed, step, purpose)
  CHECK(sampling_stream(7, 3, "sample").key == sampling_stream(7, 3, "sample").key);
  CHECK(sampling_stream(7, 3, "sample").key != sampling_stream(7, 4, "sample").key);
  CHECK(sampling_stream(7, 3, "sample").key != sampling_stream(7, 3, "eval").key);
  CHECK(sampling_stream(7, 3, "sample", 64).first_row == 64);
}

TEST_CASE("sampling uniforms lie in 0 to 1, 1 excluded, and are uncorrelated across rows and positions") {
  const int64_t rows = 400, tokens = 400;  // 160,000 numbers
  const auto u = sampling_uniforms(SamplingStream(99), rows, tokens).to(torch::kFloat64);
  CHECK(u.min().item<double>() >= 0.0);
  CHECK(u.max().item<double>() < 1.0);
  CHECK(std::abs(u.mean().item<double>() - 0.5) < 0.005);
  CHECK(std::abs(u.var().item<double>() - 1.0 / 12) < 0.002);
  // 16 bins of 10,000 expected each (standard deviation ~97): within 500
  const auto bins = (u * 16).floor().to(torch::kLong).flatten().bincount({}, 16);
  CHECK((bins - 10000).abs().max().item<int64_t>() < 500);
  // neighbours along positions and along rows: correlation ~ 1 / sqrt(n) = 0.0025
  const auto centred = u - 0.5;
  const auto along_positions = (centred.narrow(1, 0, tokens - 1) * centred.narrow(1, 1, tokens - 1)).mean().item<double>() * 12;
  const auto along_rows = (centred.narrow(0, 0, rows - 1) * centred.narrow(0, 1, rows - 1)).mean().item<double>() * 12;
  CHECK(std::abs(along_positions) < 0.015);
  CHECK(std::abs(along_rows) < 0.015);
}

TEST_CASE("inverse-CDF sampling picks the first token whose cumulative probability exceeds u") {
  const auto probs = torch::tensor({0.25f, 0.0f, 0.5f, 0.25f}).view({1, 4}).expand({6, 4}).contiguous();
  const auto u = torch::tensor({0.0f, 0.2f, 0.25f, 0.6f, 0.8f, 0.999f});
  const auto picked = sample_inverse_cdf(probs, u);
  CHECK(torch::equal(picked, torch::tensor({0, 0, 2, 2, 3, 3}, torch::kLong)));
  // unnormalised rows are scaled by their total
  CHECK(sample_inverse_cdf(probs * 4, u).equal(picked));
  // a target at the total (rounding) falls back on the last token of positive probability, never on
  // a token of probability 0
  const auto trailing_zero = torch::tensor({0.5f, 0.5f, 0.0f}).view({1, 3});
  CHECK(sample_inverse_cdf(trailing_zero, torch::tensor({1.0f})).item<int64_t>() == 1);
  // frequencies follow the probabilities: 100,000 draws from the stream
  const auto p = torch::tensor({0.05f, 0.0f, 0.45f, 0.2f, 0.3f});
  const auto draws = sample_inverse_cdf(p.view({1, 5}).expand({100000, 5}).contiguous(),
                                        sampling_uniforms(SamplingStream(5), 100000, 1).flatten());
  const auto frequencies = draws.bincount({}, 5).to(torch::kFloat64) / 100000;
  INFO("frequencies " << frequencies);
  CHECK((frequencies - p.to(torch::kFloat64)).abs().max().item<double>() < 0.006);  // ~4 standard deviations
  CHECK(frequencies[1].item<double>() == 0.0);
}
