// The single-pass AdamW update against two other ways of computing it: the same formulas as tensor ops
// (torch.optim.AdamW's single-tensor path, which TRL runs on a CPU) and LibTorch's own
// torch::optim::AdamW; and the property ZeRO relies on: a slice updated alone gives the same bits.
#include <catch2/catch.hpp>

#include <torch/optim/adamw.h>
#include <torch/types.h>

#include "rayless/ops/ops.h"
#include "rayless/trainer/optimizer.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

struct State {
  torch::Tensor param, exp_avg, exp_avg_sq;
};

State fresh(torch::ScalarType dtype, int64_t n) {
  torch::manual_seed(3);
  return {torch::randn({n}, torch::kFloat64).to(dtype), torch::zeros({n}, dtype), torch::zeros({n}, dtype)};
}

std::vector<torch::Tensor> gradients(torch::ScalarType dtype, int64_t n, int steps) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> out;
  for (int s = 0; s < steps; ++s) out.push_back(torch::randn({n}, torch::kFloat64).mul_(s + 1).to(dtype));
  return out;
}

AdamWHyper hyper_at(int64_t step) {
  AdamWHyper h;
  h.lr = 0.05;
  h.beta1 = 0.9;
  h.beta2 = 0.99;
  h.eps = 1e-6;
  h.weight_decay = 0.1;
  h.step = step;
  return h;
}

// largest difference, relative to the largest magnitude (a moment near zero has no relative rounding)
double max_relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto b64 = b.to(torch::kFloat64);
  return (a.to(torch::kFloat64) - b64).abs().max().item<double>() / b64.abs().max().item<double>();
}

}  // namespace

TEST_CASE("adamw_update equals the tensor-op formulas and torch::optim::AdamW over several steps") {
  const int64_t n = 1037;  // not a multiple of any vector width
  const int steps = 4;
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    INFO((dtype == torch::kFloat64 ? "float64" : "float32"));
    const auto grads = gradients(dtype, n, steps);
    State single = fresh(dtype, n), ops = fresh(dtype, n);
    auto torch_param = fresh(dtype, n).param.clone().requires_grad_(true);
    torch::optim::AdamW reference({torch_param}, torch::optim::AdamWOptions(0.05).betas({0.9, 0.99}).eps(1e-6).weight_decay(0.1));
    for (int s = 0; s < steps; ++s) {
      adamw_update(single.param, grads[s], single.exp_avg, single.exp_avg_sq, hyper_at(s + 1));
      adamw_update_tensor_ops(ops.param, grads[s], ops.exp_avg, ops.exp_avg_sq, hyper_at(s + 1));
      torch_param.mutable_grad() = grads[s].clone();
      reference.step();
    }
    const double rounding = dtype == torch::kFloat64 ? 1e-14 : 1e-6;
    CHECK(max_relative_difference(single.param, ops.param) < rounding);
    CHECK(max_relative_difference(single.exp_avg, ops.exp_avg) < rounding);
    CHECK(max_relative_difference(single.exp_avg_sq, ops.exp_avg_sq) < rounding);
    CHECK(max_relative_difference(single.param, torch_param.detach()) < rounding);
    // the update moved the weights by far more than the rounding allowed above
    CHECK(max_relative_difference(single.param, fresh(dtype, n).param) > 1e-3);
  }
}

TEST_CASE("adamw_update gives a slice updated alone the same bits as the whole tensor (ZeRO)") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
    const int64_t n = 1037, cut = 517;
    const auto grads = gradients(dtype, n, 3);
    State whole = fresh(dtype, n), parts = fresh(dtype, n);
    for (int s = 0; s < 3; ++s) {
      adamw_update(whole.param, grads[s], whole.exp_avg, whole.exp_avg_sq, hyper_at(s + 1));
      for (auto [start, length] : {std::pair<int64_t, int64_t>{0, cut}, {cut, n - cut}}) {
        auto p = parts.param.narrow(0, start, length), m = parts.exp_avg.narrow(0, start, length),
             v = parts.exp_avg_sq.narrow(0, start, length);
        adamw_update(p, grads[s].narrow(0, start, length), m, v, hyper_at(s + 1));
      }
    }
    CHECK(torch::equal(whole.param, parts.param));
    CHECK(torch::equal(whole.exp_avg, parts.exp_avg));
    CHECK(torch::equal(whole.exp_avg_sq, parts.exp_avg_sq));
  }
}

// The float32 vector loop (AVX-512, or AVX2, where the CPU has it) against the scalar loop, which a one-element
// tensor always takes: the same bits, element by element, with a clip coefficient in play. Each loop in
// turn: the plan's, AVX2 with AVX-512 off, the portable loop alone.
TEST_CASE("adamw_update's vector loop gives the scalar loop's bits") {
  const int loops = GENERATE(0, 1, 2);
  const KernelOverride avx512(Kernel::avx512_adamw, loops == 0), avx2(Kernel::avx2_adamw, loops <= 1);
  INFO("AVX-512 loop " << kernel_plan().on(Kernel::avx512_adamw) << ", AVX2 loop " << kernel_plan().on(Kernel::avx2_adamw));
  const int64_t n = 1037;
  const auto grads = gradients(torch::kFloat32, n, 3);
  State whole = fresh(torch::kFloat32, n), single = fresh(torch::kFloat32, n);
  for (int s = 0; s < 3; ++s) {
    AdamWHyper hyper = hyper_at(s + 1);
    hyper.grad_scale = 0.37;  // not a power of two: the product rounds
    adamw_update(whole.param, grads[s], whole.exp_avg, whole.exp_avg_sq, hyper);
    for (int64_t i = 0; i < n; ++i) {
      auto p = single.param.narrow(0, i, 1), m = single.exp_avg.narrow(0, i, 1), v = single.exp_avg_sq.narrow(0, i, 1);
      adamw_update(p, grads[s].narrow(0, i, 1), m, v, hyper);
    }
  }
  CHECK(torch::equal(whole.param, single.param));
  CHECK(torch::equal(whole.exp_avg, single.exp_avg));
  CHECK(torch::equal(whole.exp_avg_sq, single.exp_avg_sq));
}

// The clip coefficient inside the pass (stage 0) against clip_by_norm's product first and then the
// update (ZeRO stages): the same bits in every dtype, and the tensor-op path agrees.
TEST_CASE("adamw_update's grad_scale is clip_by_norm's product, bit for bit") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64}) {
    INFO(dtype);
    const int64_t n = 1037;
    const auto grads = gradients(dtype, n, 3);
    State inside = fresh(dtype, n), before = fresh(dtype, n), ops = fresh(dtype, n);
    for (int s = 0; s < 3; ++s) {
      const double coefficient = clip_coefficient(grads[s].options(), 3.7 * (s + 1), 1.0);
      REQUIRE(coefficient < 1);  // the clip is active
      AdamWHyper scaled = hyper_at(s + 1);
      scaled.grad_scale = coefficient;
      adamw_update(inside.param, grads[s], inside.exp_avg, inside.exp_avg_sq, scaled);
      std::vector<torch::Tensor> clipped{grads[s].clone()};
      clip_by_norm(clipped, 3.7 * (s + 1), 1.0);
      adamw_update(before.param, clipped[0], before.exp_avg, before.exp_avg_sq, hyper_at(s + 1));
      if (dtype != torch::kBFloat16) adamw_update_tensor_ops(ops.param, grads[s], ops.exp_avg, ops.exp_avg_sq, scaled);
    }
    CHECK(torch::equal(inside.param, before.param));
    CHECK(torch::equal(inside.exp_avg, before.exp_avg));
    CHECK(torch::equal(inside.exp_avg_sq, before.exp_avg_sq));
    if (dtype != torch::kBFloat16) {
      CHECK(max_relative_difference(inside.param, ops.param) < (dtype == torch::kFloat64 ? 1e-14 : 1e-6));
      CHECK(max_relative_difference(inside.exp_avg_sq, ops.exp_avg_sq) < (dtype == torch::kFloat64 ? 1e-14 : 1e-6));
    }
  }
}

// sum_of_squares' vector loop against the same sum written out: eight float64 partial sums, element
// i going to sum i % 8, combined pairwise.
TEST_CASE("sum_of_squares is its eight partial sums, bit for bit") {
  // each loop in turn: the plan's, AVX2 with AVX-512 off, the portable loop alone
  const int loops = GENERATE(0, 1, 2);
  const KernelOverride avx512(Kernel::avx512_sum_of_squares, loops == 0), avx2(Kernel::avx2_sum_of_squares, loops <= 1);
  INFO("AVX-512 loop " << kernel_plan().on(Kernel::avx512_sum_of_squares) << ", AVX2 loop "
                       << kernel_plan().on(Kernel::avx2_sum_of_squares));
  torch::manual_seed(23);
  for (int64_t n : {int64_t{1037}, int64_t{8}, int64_t{5}, int64_t{100003}}) {
    INFO(n);
    const auto x = torch::randn({n}).mul_(3);
    const float* data = x.data_ptr<float>();
    double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) partial[j] = partial[j] + static_cast<double>(data[i + j]) * static_cast<double>(data[i + j]);
    for (; i < n; ++i) partial[0] = partial[0] + static_cast<double>(data[i]) * static_cast<double>(data[i]);
    const double expected =
        ((partial[0] + partial[1]) + (partial[2] + partial[3])) + ((partial[4] + partial[5]) + (partial[6] + partial[7]));
    CHECK(sum_of_squares(x).item<double>() == expected);
  }
}
