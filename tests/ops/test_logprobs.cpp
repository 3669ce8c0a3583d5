#include <catch2/catch.hpp>

#include "rayless/base/error.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

struct Problem {
  torch::Tensor hidden, weight, bias, ids;
};

Problem make_problem(torch::ScalarType dtype, int64_t batch, int64_t positions, int64_t hidden_size, int64_t vocab,
                     bool with_bias) {
  torch::manual_seed(11);
  Problem p;
  p.hidden = torch::randn({batch, positions, hidden_size}, torch::kFloat64).to(dtype).requires_grad_(true);
  p.weight = (torch::randn({vocab, hidden_size}, torch::kFloat64) * 0.5).to(dtype).requires_grad_(true);
  if (with_bias) p.bias = torch::randn({vocab}, torch::kFloat64).to(dtype).requires_grad_(true);
  p.ids = torch::randint(vocab, {batch, positions}, torch::kLong);
  return p;
}

// d(sum(c * logps)) for random c: value and gradients of every input
struct Result {
  torch::Tensor logps, entropies, grad_hidden, grad_weight, grad_bias;
};

template <typename Compute>
Result run(Problem p, Compute compute) {
  for (auto* t : {&p.hidden, &p.weight, &p.bias})
    if (t->defined()) *t = t->detach().clone().requires_grad_(true);
  auto out = compute(p);
  torch::manual_seed(5);
  auto cotangent = torch::randn(out.logps.sizes(), torch::kFloat64).to(out.logps.scalar_type());
  (out.logps * cotangent).sum().backward();
  return {out.logps.detach(), out.entropies.detach(), p.hidden.grad(), p.weight.grad(),
          p.bias.defined() ? p.bias.grad() : torch::Tensor()};
}

LogprobsAndEntropies naive(const Problem& p, double temperature) {
  return naive_logprobs(torch::linear(p.hidden, p.weight, p.bias), p.ids, temperature);
}

void require_close(const torch::Tensor& got, const torch::Tensor& expected, double tolerance) {
  REQUIRE(got.defined());
  REQUIRE(got.sizes() == expected.sizes());
  const double scale = std::max(expected.abs().max().item<double>(), 1e-30);
  const double error = (got.to(torch::kFloat64) - expected.to(torch::kFloat64)).abs().max().item<double>() / scale;
  INFO("relative error " << error);
  CHECK(error <= tolerance);
}

void require_same(const Result& got, const Result& expected, double tolerance) {
  require_close(got.logps, expected.logps, tolerance);
  require_close(got.entropies, expected.entropies, tolerance);
  require_close(got.grad_hidden, expected.grad_hidden, tolerance);
  require_close(got.grad_weight, expected.grad_weight, tolerance);
  if (expected.grad_bias.defined()) require_close(got.grad_bias, expected.grad_bias, tolerance);
}

}  // namespace

TEST_CASE("fused and selective log-probs equal the naive log-softmax in value and gradient (float64)") {
  for (double temperature : {1.0, 0.7}) {
    for (bool with_bias : {false, true}) {
      auto problem = make_problem(torch::kFloat64, 3, 5, 8, 37, with_bias);
      auto expected = run(problem, [&](const Problem& p) { return naive(p, temperature); });
      // chunk sizes that divide the 15 positions and ones that do not
      for (int64_t chunk : {1, 4, 15, 64}) {
        INFO("temperature " << temperature << " bias " << with_bias << " chunk " << chunk);
        auto fused = run(problem, [&](const Problem& p) {
          return fused_logprobs(p.hidden, p.weight, p.bias, p.ids, temperature, chunk);
        });
        require_same(fused, expected, 1e-12);
        auto selective = run(problem, [&](const Problem& p) {
          return selective_logprobs_and_entropies(torch::linear(p.hidden, p.weight, p.bias), p.ids, temperature, chunk);
        });
        require_same(selective, expected, 1e-12);
      }
    }
  }
}

TEST_CASE("fused log-probs in float32 and bfloat16 stay close to the float64 reference") {
  auto reference_problem = make_problem(torch::kFloat64, 2, 6, 16, 50, true);
  auto expected = run(reference_problem, [&](const Problem& p) { return naive(p, 0.9); });
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    Problem p = reference_problem;
    p.hidden = p.hidden.detach().to(dtype);
    p.weight = p.weight.detach().to(dtype);
    p.bias = p.bias.detach().to(dtype);
    auto fused = run(p, [&](const Problem& q) { return fused_logprobs(q.hidden, q.weight, q.bias, q.ids, 0.9, 5); });
    CHECK(fused.logps.scalar_type() == torch::kFloat32);  // log-probs come back in float32 at least
    CHECK(fused.grad_weight.scalar_type() == dtype);
    const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 5e-2;
    INFO("dtype " << dtype);
    require_close(fused.logps, expected.logps, tolerance);
    require_close(fused.entropies, expected.entropies, tolerance);
    require_close(fused.grad_hidden, expected.grad_hidden, tolerance);
    require_close(fused.grad_weight, expected.grad_weight, tolerance);
  }
}

TEST_CASE("fused log-probs give gradients only where asked") {
  auto p = make_problem(torch::kFloat32, 1, 4, 6, 11, false);
  auto hidden = p.hidden.detach().requires_grad_(true);
  auto frozen_weight = p.weight.detach();
  auto out = fused_logprobs(hidden, frozen_weight, torch::Tensor(), p.ids, 1.0, 3);
  out.logps.sum().backward();
  CHECK(hidden.grad().defined());
  CHECK_FALSE(out.entropies.requires_grad());
}

TEST_CASE("log-probs reject mismatched shapes and bad ids") {
  auto logits = torch::randn({2, 3, 5});
  CHECK_THROWS_WITH(selective_logprobs(logits, torch::zeros({2, 4}, torch::kLong)), Catch::Contains("token_ids"));
  CHECK_THROWS_WITH(selective_logprobs(logits, torch::full({2, 3}, 5, torch::kLong)), Catch::Contains("vocabulary"));
  CHECK_THROWS_AS(selective_logprobs(torch::randn({2, 3}), torch::zeros({2, 3}, torch::kLong)), InputError);
  CHECK_THROWS_WITH(fused_logprobs(torch::randn({2, 3, 4}), torch::randn({5, 6}), torch::Tensor(),
                                   torch::zeros({2, 3}, torch::kLong)),
                    Catch::Contains("LM head weight"));
  CHECK_THROWS_WITH(fused_logprobs(torch::randn({2, 3, 4}), torch::randn({5, 4}), torch::randn({4}),
                                   torch::zeros({2, 3}, torch::kLong)),
                    Catch::Contains("bias"));
}
