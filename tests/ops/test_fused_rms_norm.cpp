// fused_rms_norm (ops/cuda): RMSNorm as LibTorch's _fused_rms_norm, one kernel on a GPU. On the CPU
// that operator is LibTorch's composition, so the entry runs here against transformers' formula (the
// reference it replaces on a GPU), values and gradients; tests/devices/test_cuda_vs_cpu.cpp runs its
// CUDA kernel.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "model/helpers.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "rayless/ops/kernel_plan.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

using test::transformers_rms_norm;

TEST_CASE("fused_rms_norm: transformers' RMSNorm, in float32 to rounding, in bfloat16 one rounding nearer") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  // a decode step's rows of the 0.5B shape, a packed pass's tokens, q/k heads (qk_norm), a strided view
  for (const auto& shape : {std::vector<int64_t>{16, 1, 896}, {37, 64}, {2, 5, 8, 128}}) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      INFO("x " << torch::IntArrayRef(shape) << ", " << dtype);
      const auto x = (3.0 * torch::randn(shape, torch::kFloat64)).to(dtype);
      const auto weight = (1.0 + 0.5 * torch::randn({shape.back()}, torch::kFloat64)).to(dtype);
      const double eps = 1e-6;
      const auto fused = cuda::fused_rms_norm(x, weight, eps);
      REQUIRE(fused.defined());
      CHECK(fused.sizes() == x.sizes());
      CHECK(fused.scalar_type() == dtype);
      const auto reference = transformers_rms_norm(x, weight, eps);
      if (dtype == torch::kFloat32) {
        const double tolerance = 1e-6;
        const double error = ((fused - reference).abs() / (1.0 + reference.abs())).max().item<double>();
        INFO("largest difference " << error);
        CHECK(error <= tolerance);
      } else {
        // exact: float64 throughout; the fused kernel rounds once, the reference twice
        const auto x64 = x.to(torch::kFloat64), w64 = weight.to(torch::kFloat64);
        const auto exact = w64 * x64 * torch::rsqrt(x64.pow(2).mean(-1, true) + eps);
        const auto fused_error = (fused.to(torch::kFloat64) - exact).abs();
        const auto reference_error = (reference.to(torch::kFloat64) - exact).abs();
        // within one bfloat16 rounding of the exact value (2^-8 relative), and no further than the reference overall
        CHECK((fused_error <= exact.abs() * std::ldexp(1.0, -8) + 1e-30).all().item<bool>());
        CHECK(fused_error.sum().item<double>() <= reference_error.sum().item<double>());
      }
    }
  }
  // a view whose rows are not contiguous in memory
  const auto base = torch::randn({6, 2, 64});
  const auto view = base.transpose(0, 1);
  const auto weight = torch::randn({64});
  CHECK((cuda::fused_rms_norm(view, weight, 1e-5) - transformers_rms_norm(view, weight, 1e-5)).abs().max().item<double>() <= 1e-5);
}

TEST_CASE("fused_rms_norm: gradients of x and the weight as the reference's, in float32") {
  torch::manual_seed(12);
  const auto upstream = torch::randn({4, 3, 32});
  std::vector<torch::Tensor> grads[2];
  for (const bool fused : {true, false}) {
    torch::manual_seed(13);  // the same x and weight
    auto x = torch::randn({4, 3, 32}).requires_grad_(true);
    auto weight = (1.0 + torch::randn({32})).requires_grad_(true);
    const auto out = fused ? cuda::fused_rms_norm(x, weight, 1e-6) : transformers_rms_norm(x, weight, 1e-6);
    REQUIRE(out.defined());
    (out * upstream).sum().backward();
    grads[fused ? 0 : 1] = {x.grad(), weight.grad()};
  }
  for (size_t i = 0; i < 2; ++i) {
    INFO((i == 0 ? "gradient of x" : "gradient of the weight"));
    CHECK(((grads[0][i] - grads[1][i]).abs() / (1.0 + grads[1][i].abs())).max().item<double>() <= 1e-5);
    CHECK(grads[1][i].abs().max().item<double>() > 0.0);
  }
}

TEST_CASE("fused_rms_norm: declines mixed dtypes, float64 and with its switch off, and is the CUDA backend's norm, not the CPU's") {
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({3, 16}), weight = torch::randn({16});
  CHECK(cuda::fused_rms_norm(x, weight, 1e-6).defined());
  // the reference's result follows both dtypes (float32 weights under bfloat16 activations: float32)
  CHECK_FALSE(cuda::fused_rms_norm(x.to(torch::kBFloat16), weight, 1e-6).defined());
  CHECK_FALSE(cuda::fused_rms_norm(x, torch::randn({8}), 1e-6).defined());
  // float64 (the parity cases): the reference, float32 sums as transformers'
  CHECK_FALSE(cuda::fused_rms_norm(x.to(torch::kFloat64), weight.to(torch::kFloat64), 1e-6).defined());
  {
    const KernelOverride off(Kernel::fused_rms_norm, false);
    CHECK_FALSE(cuda::fused_rms_norm(x, weight, 1e-6).defined());
  }
  CHECK(backend_for(torch::Device(torch::kCUDA, 0)).rms_norm == &cuda::fused_rms_norm);
  CHECK(backend_for(torch::kCPU).rms_norm != &cuda::fused_rms_norm);
}
