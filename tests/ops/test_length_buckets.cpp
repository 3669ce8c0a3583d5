// Packed attention in length buckets (ops.h, bucketed_attention): the plan against every partition tried by
// brute force, and the bucketed attention against one scaled_dot_product_attention call on the padded
// grid, values and gradients.
#include <catch2/catch.hpp>

#include <ATen/ops/scaled_dot_product_attention.h>
#include <limits>
#include <random>

#include "rayless/model/attention_window.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

double plan_cost(const std::vector<LengthBucket>& plan, int64_t past, int64_t heads, double call_cost) {
  double cost = 0.0;
  for (const auto& b : plan)
    cost += static_cast<double>(b.count * heads * b.length * (past + b.length)) + call_cost;
  return cost;
}

// The least cost over all 2^(n-1) ways to cut n sorted, non-zero lengths into contiguous buckets.
double brute_force_cost(const std::vector<int64_t>& lengths, int64_t past, int64_t heads, double call_cost) {
  const size_t n = lengths.size();
  double best = std::numeric_limits<double>::infinity();
  for (uint64_t cuts = 0; cuts < (uint64_t{1} << (n - 1)); ++cuts) {
    std::vector<LengthBucket> plan;
    int64_t first = 0;
    for (size_t i = 0; i < n; ++i)
      if (i == n - 1 || (cuts >> i & 1)) {
        plan.push_back({first, static_cast<int64_t>(i) + 1 - first, lengths[i]});
        first = static_cast<int64_t>(i) + 1;
      }
    best = std::min(best, plan_cost(plan, past, heads, call_cost));
  }
  return best;
}

struct AttentionCase {
  torch::Tensor q_padded, k, v, mask, token_index;
  int64_t B, T, H, D;
};

// B rows of the given query lengths in a [B, T] grid after `past` cached positions (each row's cache
// partly left-padded), grouped-query heads; the packed tokens are each row's slots 0 .. length-1.
AttentionCase attention_case(const std::vector<int64_t>& lengths, int64_t T, int64_t past, torch::Dtype dtype) {
  torch::manual_seed(5);
  AttentionCase c;
  c.B = static_cast<int64_t>(lengths.size());
  c.T = T;
  c.H = 4;
  c.D = 8;
  const int64_t kv_heads = 2;
  // the same values in every dtype: drawn in float64, rounded to bfloat16
  auto draw = [&](std::vector<int64_t> sizes) {
    return torch::randn(sizes, torch::kFloat64).to(torch::kBFloat16).to(dtype);
  };
  c.q_padded = draw({c.B, c.H, T, c.D});
  c.k = draw({c.B, kv_heads, past + T, c.D});
  c.v = draw({c.B, kv_heads, past + T, c.D});
  auto padding = torch::zeros({c.B, past + T}, torch::kLong);
  std::vector<int64_t> slots;
  for (int64_t b = 0; b < c.B; ++b) {
    padding[b].narrow(0, std::min<int64_t>(b, past), past - std::min<int64_t>(b, past)).fill_(1);  // left padding
    padding[b].narrow(0, past, lengths[static_cast<size_t>(b)]).fill_(1);
    for (int64_t i = 0; i < lengths[static_cast<size_t>(b)]; ++i) slots.push_back(b * T + i);
  }
  c.mask = attention_masks(padding, past, T, 0).full;
  c.token_index = torch::tensor(slots, torch::kLong);
  return c;
}

struct AttentionResult {
  torch::Tensor out, grad_q, grad_k, grad_v;
};

// The attention of the packed tokens, bucketed (call_cost >= 0) or as one padded call (call_cost < 0),
// and the gradients of a loss weighing every output element differently.
AttentionResult attend(const AttentionCase& c, double call_cost) {
  auto q = c.q_padded.clone().requires_grad_(true);
  auto k = c.k.clone().requires_grad_(true);
  auto v = c.v.clone().requires_grad_(true);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  torch::Tensor out;
  if (call_cost >= 0) {
    const auto q_packed = q.transpose(1, 2).reshape({c.B * c.T, c.H, c.D}).index_select(0, c.token_index);
    out = bucketed_attention(q_packed, k, v, c.mask, c.token_index, scale, true, call_cost);
  } else {
    out = at::scaled_dot_product_attention(q, k, v, c.mask, 0.0, false, scale, true)
              .transpose(1, 2)
              .reshape({c.B * c.T, c.H * c.D})
              .index_select(0, c.token_index);
  }
  const auto weights = torch::linspace(-1.0, 2.0, out.numel(), out.options()).view(out.sizes());
  (out * weights).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("plan_length_buckets finds the cheapest cut of the sorted rows (against brute force)") {
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> lengths(1 + random() % 9);
    for (auto& l : lengths) l = 1 + static_cast<int64_t>(random() % 300);
    std::sort(lengths.begin(), lengths.end());
    const int64_t past = static_cast<int64_t>(random() % 40), heads = 1 + static_cast<int64_t>(random() % 12);
    const double call_cost = std::vector<double>{0.0, 1e3, 2e5, 1e7}[static_cast<size_t>(trial % 4)];
    const auto plan = plan_length_buckets(lengths, past, heads, call_cost);
    INFO("trial " << trial);
    // every row once, in order, each bucket as long as its longest row
    int64_t next = 0;
    for (const auto& b : plan) {
      CHECK(b.first == next);
      CHECK(b.count > 0);
      CHECK(b.length == lengths[static_cast<size_t>(b.first + b.count - 1)]);
      next += b.count;
    }
    CHECK(next == static_cast<int64_t>(lengths.size()));
    CHECK(plan_cost(plan, past, heads, call_cost) ==
          Approx(brute_force_cost(lengths, past, heads, call_cost)).epsilon(1e-12));
  }
}

TEST_CASE("plan_length_buckets: rows with nothing to compute join no bucket, the call cost sets the count") {
  const std::vector<int64_t> lengths = {0, 0, 3, 4, 120, 250, 256};
  const auto plan = plan_length_buckets(lengths, 16, 10, 2e5);
  REQUIRE(!plan.empty());
  CHECK(plan.front().first == 2);
  CHECK(plan.size() > 1);  // 3-token rows are not attended as 256 when a call costs less
  CHECK(plan_length_buckets(lengths, 16, 10, 1e12).size() == 1);  // calls dearer than any padding
  CHECK(plan_length_buckets({0, 0}, 16, 10, 2e5).empty());
  CHECK_THROWS(plan_length_buckets({5, 3}, 0, 1, 0.0));
}

TEST_CASE("bucketed attention equals one padded attention call, values and gradients") {
  // rows of every kind: empty, one token, the full width, equal lengths, a cached prefix; without an
  // empty row, one bucket holds every row (taken in place, not gathered)
  for (const std::vector<int64_t>& lengths : {std::vector<int64_t>{4, 0, 13, 1, 9, 13, 2, 4}, std::vector<int64_t>{4, 13, 1, 9, 13, 2}})
  for (const int64_t past : {0, 5}) {
    INFO("rows " << lengths.size() << ", past " << past);
    const auto c = attention_case(lengths, 13, past, torch::kFloat64);
    REQUIRE(plan_length_buckets({1, 2, 4, 9, 13, 13}, past, c.H, 0.0).size() > 3);  // several buckets
    const AttentionResult padded = attend(c, -1.0);
    for (const double call_cost : {0.0, 2e5}) {  // buckets of each length, and one bucket
      INFO("call cost " << call_cost);
      const AttentionResult bucketed = attend(c, call_cost);
      CHECK(max_difference(bucketed.out, padded.out) < 1e-12);
      CHECK(max_difference(bucketed.grad_q, padded.grad_q) < 1e-12);
      CHECK(max_difference(bucketed.grad_k, padded.grad_k) < 1e-12);
      CHECK(max_difference(bucketed.grad_v, padded.grad_v) < 1e-12);
      CHECK(padded.grad_k.abs().max().item<double>() > 1e-2);  // the loss reaches the keys at all
    }
  }
}

TEST_CASE("bucketed attention in bfloat16 stays within its rounding of the padded call") {
  const std::vector<int64_t> lengths = {3, 17, 1, 30, 30, 8};
  const auto c = attention_case(lengths, 30, 6, torch::kBFloat16);
  const auto reference = attend(attention_case(lengths, 30, 6, torch::kFloat64), -1.0);
  const AttentionResult padded = attend(c, -1.0), bucketed = attend(c, 0.0);
  // the bucketed error against float64 is of the padded call's own size
  const double padded_error = max_difference(padded.out, reference.out);
  CHECK(max_difference(bucketed.out, reference.out) < 2.0 * padded_error + 1e-2);
  CHECK(max_difference(bucketed.grad_q, reference.grad_q) < 2.0 * max_difference(padded.grad_q, reference.grad_q) + 1e-2);
  CHECK(max_difference(bucketed.grad_k, reference.grad_k) < 2.0 * max_difference(padded.grad_k, reference.grad_k) + 1e-2);
}
