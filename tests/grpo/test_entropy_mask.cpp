#include <catch2/catch.hpp>

#include <cstring>

#include "rayless/base/error.h"
#include "rayless/grpo/entropy_mask.h"

using namespace rayless;

namespace {
uint32_t bits(float value) {
  uint32_t out;
  std::memcpy(&out, &value, sizeof out);
  return out;
}
}  // namespace

TEST_CASE("entropy quantile is bit-identical to torch::quantile") {
  torch::manual_seed(7);
  const double qs[] = {0.0, 0.05, 0.1, 0.2, 0.25, 1.0 / 3.0, 0.5, 0.6, 0.8, 0.9, 0.95, 0.999, 1.0};
  int checked = 0;
  for (int64_t n : {1, 2, 3, 5, 10, 17, 100, 1000, 4099, 65537}) {
    for (int trial = 0; trial < 6; ++trial) {
      // entropies-like values, with ties in some trials
      auto values = torch::rand({n}) * 5.0;
      if (trial % 3 == 0) values = torch::round(values * 4) / 4;
      for (double q : qs) {
        const float expected = torch::quantile(values, q).item<float>();
        const float got = entropy_quantile(values, q);
        INFO("n=" << n << " q=" << q << " expected=" << expected << " got=" << got);
        REQUIRE(bits(got) == bits(expected));
        ++checked;
      }
    }
  }
  CHECK(checked > 500);
}

TEST_CASE("quantile_rank follows float32 rank arithmetic") {
  auto r = quantile_rank(5, 0.5);
  CHECK(r.below == 2);
  CHECK(r.above == 2);
  CHECK(r.weight == 0.0f);
  r = quantile_rank(4, 0.5);
  CHECK(r.below == 1);
  CHECK(r.above == 2);
  CHECK(r.weight == 0.5f);
  r = quantile_rank(1, 0.3);
  CHECK(r.below == 0);
  CHECK(r.above == 0);
  CHECK_THROWS_AS(quantile_rank(0, 0.5), InputError);
  CHECK_THROWS_AS(quantile_rank(3, 1.5), InputError);
  CHECK_THROWS_AS(entropy_quantile(torch::empty({0}), 0.5), InputError);
}

TEST_CASE("entropy mask keeps active tokens at or above the threshold") {
  auto entropies = torch::tensor({{0.5, 2.0, 3.0}, {1.0, 4.0, 0.1}}, torch::kFloat64);
  auto mask = torch::tensor({{1, 1, 0}, {1, 1, 1}}, torch::kInt8);
  auto keep = entropy_mask(entropies, mask, 1.0f);
  auto expected = torch::tensor({{false, true, false}, {true, true, false}});
  CHECK(torch::equal(keep, expected));
  // q = 0.5 of the five active values {0.5, 2, 1, 4, 0.1} -> 1.0
  auto high = high_entropy_mask(entropies, mask, 0.5);
  CHECK(torch::equal(high, expected));
  CHECK_FALSE(high_entropy_mask(entropies, torch::zeros_like(mask), 0.5).any().item<bool>());
  CHECK_THROWS_AS(entropy_mask(entropies, torch::ones({2, 2}), 1.0f), InputError);
}
