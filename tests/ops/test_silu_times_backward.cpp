// silu_times_backward (ops.h): one pass, its AVX-512 loop and its portable one, against autograd's ops,
// element by element.
#include <catch2/catch.hpp>

#include <ATen/ops/silu_backward.h>

#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

// |a - b| in units of b's bfloat16 step (8 significant bits), largest over the elements
double largest_difference_in_steps(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  const auto step = torch::exp2(torch::floor(torch::log2(y.abs().clamp_min(1e-30))) - 7);
  return ((x - y).abs() / step).max().item<double>();
}

}  // namespace

TEST_CASE("silu_times_backward in bfloat16: every element autograd's or its neighbour") {
  // the AVX-512 loop where the CPU has it, and the portable loop alone
  const bool vector_loop = GENERATE(true, false);
  const KernelOverride loop(Kernel::avx512_silu_times_backward, vector_loop);
  INFO("AVX-512 " << (kernel_plan().on(Kernel::avx512_silu_times_backward) ? "on" : "off (portable loop only)"));
  torch::manual_seed(13);
  // a training pass's width with a ragged tail (numel not a multiple of 16), and gate values out to
  // where exp over- and underflows in float32
  const int64_t rows = 37, width = 1792 + 5;
  auto gate = (torch::randn({rows, width}) * 4).to(torch::kBFloat16);
  gate.view({-1}).narrow(0, 0, 8).copy_(torch::tensor({-200.0, -90.0, -20.0, 0.0, 1e-30, 20.0, 90.0, 200.0}));
  const auto up = torch::randn({rows, width}).to(torch::kBFloat16);
  const auto grad = torch::randn({rows, width}).to(torch::kBFloat16);
  const SiluTimesGrads fused = silu_times_backward(gate, up, grad);
  const auto silu = torch::silu(gate);
  const std::vector<std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>>> results{
      {"product", {fused.product, silu * up}},
      {"grad_gate", {fused.grad_gate, at::silu_backward(grad * up, gate)}},
      {"grad_up", {fused.grad_up, grad * silu}}};
  for (const auto& [name, pair] : results) {
    const auto& [actual, expected] = pair;
    INFO(name);
    CHECK(actual.scalar_type() == torch::kBFloat16);
    CHECK(actual.sizes() == expected.sizes());
    CHECK(largest_difference_in_steps(actual, expected) <= 1.0);
    const double same = actual.eq(expected).to(torch::kFloat64).mean().item<double>();
    INFO("share of elements bit for bit autograd's: " << same);
    CHECK(same >= 0.999);
  }
}

TEST_CASE("silu_times_backward in float32: autograd's ops, bit for bit") {
  torch::manual_seed(17);
  const auto gate = torch::randn({9, 100}), up = torch::randn({9, 100}), grad = torch::randn({9, 100});
  const SiluTimesGrads out = silu_times_backward(gate, up, grad);
  CHECK(torch::equal(out.product, torch::silu(gate) * up));
  CHECK(torch::equal(out.grad_gate, at::silu_backward(grad * up, gate)));
  CHECK(torch::equal(out.grad_up, grad * torch::silu(gate)));
}
