// The single-pass AdamW update against two other ways of computing it: the same formulas as tensor ops
// (torch.optim.AdamW's single-tensor path, which TRL runs on a CPU) and LibTorch's own
// torch::optim::AdamW; and the property ZeRO relies on: a slice updated alone gives the same bits.
#include <catch2/catch.hpp>

#include <torch/optim/adamw.h>
#include <torch/types.h>

#include "rayless/trainer/adamw_update.h"

using namespace rayless;

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
