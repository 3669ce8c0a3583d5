// apply_rotary (ops.h): transformers' rotary embedding forward bit for bit; in a packed
// bfloat16 pass its one-pass backward against autograd's and against float64.
#include <catch2/catch.hpp>

#include "model/helpers.h"

#include "rayless/ops/autocast_scope.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

torch::Tensor reference_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  return x * cos + torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1) * sin;
}

struct Result {
  torch::Tensor out, dx;
};

// the output and x's gradient of sum(out * weights), x a leaf in `dtype`
template <typename Rotary>
Result run(Rotary rotary, const torch::Tensor& x0, const torch::Tensor& weights, torch::Dtype dtype) {
  auto x = x0.to(dtype).clone().requires_grad_();
  const auto out = rotary(x);
  (out.to(torch::kFloat64) * weights).sum().backward();
  return {out.detach(), x.grad()};
}

}  // namespace

TEST_CASE("apply_rotary on packed bfloat16 tokens: the forward's bits, one rounding in the backward") {
  // the AVX-512 backward where the CPU has it, and the portable loop alone
  const bool vector_loop = GENERATE(true, false);
  const KernelOverride loop(Kernel::avx512_rotary_backward, vector_loop);
  INFO("AVX-512 backward " << (kernel_plan().on(Kernel::avx512_rotary_backward) ? "on" : "off"));
  for (const int64_t D : {64, 128, 24}) {  // 24: no 16-wide halves, the portable loop
    INFO("head size " << D);
    torch::manual_seed(9);
    const int64_t N = 37, H = 5;
    const auto angles = torch::rand({N, 1, D / 2}) * 10;
    const auto cos = torch::cat({angles.cos(), angles.cos()}, -1), sin = torch::cat({angles.sin(), angles.sin()}, -1);
    const auto x0 = torch::randn({N, H, D}).to(torch::kBFloat16);
    const auto weights = torch::randn({N, H, D}, torch::kFloat64);
    const Result ours = run(
        [&](const torch::Tensor& x) {
          REQUIRE(rotary_backward_in_one_pass(x, cos, sin));
          return apply_rotary(x, cos, sin);
        },
        x0, weights, torch::kBFloat16);
    const Result theirs = run([&](const torch::Tensor& x) { return reference_rotary(x, cos, sin); }, x0, weights, torch::kBFloat16);
    const Result exact = run(
        [&](const torch::Tensor& x) { return reference_rotary(x, cos.to(torch::kFloat64), sin.to(torch::kFloat64)); }, x0,
        weights, torch::kFloat64);
    CHECK(ours.out.scalar_type() == torch::kFloat32);
    CHECK(torch::equal(ours.out, theirs.out));
    CHECK(ours.dx.scalar_type() == torch::kBFloat16);
    const double our_error = test::relative_l2_error(ours.dx, exact.dx), their_error = test::relative_l2_error(theirs.dx, exact.dx);
    INFO("dx: relative error " << our_error << ", autograd's " << their_error);
    CHECK(our_error <= 2.5e-3);  // one bfloat16 rounding
    CHECK(our_error < their_error);
    // each element is the float32 value rounded once: within half a bfloat16 step of the float64 one
    const auto step = exact.dx.abs().clamp_min(1e-30).log2().floor().exp2() * std::pow(2.0, -7);
    CHECK(((ours.dx.to(torch::kFloat64) - exact.dx).abs() <= 0.5 * step + 1e-6 * exact.dx.abs().max()).all().item<bool>());
  }
}

// Under bfloat16 autocast (train.bf16) the forward is one pass that returns bfloat16: ATen's float32
// x * cos + rotate_half(x) * sin cast to bfloat16, bit for bit, as the attention's autocast casts it.
TEST_CASE("apply_rotary under bfloat16 autocast: one pass giving ATen's float32 result cast to bfloat16") {
  // the AVX-512 loops where the CPU has them, and the portable ones alone
  const bool vector_loops = GENERATE(true, false);
  const KernelOverride forward(Kernel::avx512_rotary_forward, vector_loops);
  const KernelOverride backward(Kernel::avx512_rotary_backward, vector_loops);
  INFO("AVX-512 loops " << (kernel_plan().on(Kernel::avx512_rotary_forward) ? "on" : "off"));
  for (const int64_t D : {64, 128, 24}) {  // 24: the portable loop
    INFO("head size " << D);
    torch::manual_seed(19);
    const int64_t N = 41, H = 3;
    const auto angles = torch::rand({N, 1, D / 2}) * 10;
    const auto cos = torch::cat({angles.cos(), angles.cos()}, -1), sin = torch::cat({angles.sin(), angles.sin()}, -1);
    // large and small magnitudes: products and sums that round
    const auto x = (torch::randn({N, H, D}) * torch::exp2(torch::randint(-20, 20, {N, H, D}))).to(torch::kBFloat16).requires_grad_();
    torch::Tensor out;
    {
      AutocastScope autocast(true, torch::kCPU);
      REQUIRE(rotary_backward_in_one_pass(x, cos, sin));
      out = apply_rotary(x, cos, sin);
    }
    const auto expected = reference_rotary(x.detach(), cos, sin).to(torch::kBFloat16);
    CHECK(out.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(out, expected));
    // the backward takes the bfloat16 gradient: the same one-pass formula
    const auto g = torch::randn({N, H, D}).to(torch::kBFloat16);
    const auto dx = torch::autograd::grad({out}, {x}, {g})[0];
    const auto x64 = x.detach().to(torch::kFloat64).requires_grad_();
    const auto exact = torch::autograd::grad({reference_rotary(x64, cos.to(torch::kFloat64), sin.to(torch::kFloat64))},
                                             {x64}, {g.to(torch::kFloat64)})[0];
    CHECK(dx.scalar_type() == torch::kBFloat16);
    CHECK(test::relative_l2_error(dx, exact) <= 2.5e-3);  // one bfloat16 rounding
  }
}

TEST_CASE("apply_rotary elsewhere is autograd's, bit for bit") {
  torch::manual_seed(10);
  const auto angles = torch::rand({6, 1, 8}) * 10;
  const auto cos = torch::cat({angles.cos(), angles.cos()}, -1), sin = torch::cat({angles.sin(), angles.sin()}, -1);
  const auto weights = torch::randn({6, 3, 16}, torch::kFloat64);
  const auto x0 = torch::randn({6, 3, 16});
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {  // not bfloat16: autograd's backward
    const auto c = cos.to(dtype), s = sin.to(dtype);
    const Result ours = run(
        [&](const torch::Tensor& x) {
          CHECK_FALSE(rotary_backward_in_one_pass(x, c, s));
          return apply_rotary(x, c, s);
        },
        x0, weights, dtype);
    const Result theirs = run([&](const torch::Tensor& x) { return reference_rotary(x, c, s); }, x0, weights, dtype);
    CHECK(torch::equal(ours.out, theirs.out));
    CHECK(torch::equal(ours.dx, theirs.dx));
  }
}
