// The decode step's one-pass float32 RMSNorm (avx2_decode_rms_norm, ops/cpu/x86/avx2) against the same
// norm in float64 and rms_norm's reference (LibTorch's operators), which it replaces; where it declines
// to run; and a model's cached decode with it against the model without it.
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <filesystem>
#include <vector>

#include "rayless/ops/autocast_scope.h"
#include "ops/cpu/cpu_backend.h"
#include "decode_kernel_checks.h"
#include "rayless/model/model.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
bool no_kernel_here() { return testing::kernel_missing(kernel_plan().on(Kernel::avx2_decode_rms_norm), "decode RMSNorm"); }

// weight * x / sqrt(mean(x^2) + eps) in float64
torch::Tensor exact_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto x64 = x.to(torch::kFloat64);
  return weight.to(torch::kFloat64) * x64 * torch::rsqrt(x64.pow(2).mean(-1, true) + eps);
}

// the largest error relative to the exact value at that element (testing::relative_error's floor)
double relative_error(const torch::Tensor& out, const torch::Tensor& exact) {
  return testing::relative_error(out, exact, 1e-3);
}
}  // namespace

TEST_CASE("decode rms_norm: float64's norm to float32 rounding, as near as LibTorch's operators") {
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  // the tiny and small benchmark models' hidden sizes; sizes with a remainder past 8 floats; one float
  for (const int64_t dim : {256, 640, 19, 1000, 7, 1}) {
    for (const int64_t rows : {1, 16, 33}) {
      for (const double eps : {1e-6, 1e-5}) {
        INFO("rows " << rows << ", dim " << dim << ", eps " << eps);
        // rows of very different sizes, as hidden states are
        const auto x = torch::randn({rows, 1, dim}) * torch::logspace(-3, 3, rows).view({rows, 1, 1});
        const auto weight = torch::randn({dim});
        const auto out = cpu::decode_rms_norm(x, weight, eps);
        REQUIRE(out.defined());
        REQUIRE(out.sizes() == x.sizes());
        REQUIRE(out.scalar_type() == torch::kFloat32);
        const auto exact = exact_rms_norm(x, weight, eps);
        const auto libtorch = [&] {  // the reference, LibTorch's operators
          const KernelOverride off(Kernel::avx2_decode_rms_norm, false);
          return rms_norm(x, weight, eps);
        }();
        const double error = relative_error(out, exact), libtorch_error = relative_error(libtorch, exact);
        CAPTURE(error, libtorch_error);
        // two products' roundings and a sum of squares' rounding: a few float32 ulps (6e-8 each)
        CHECK(error < 1e-6);
        CHECK(error <= 2 * libtorch_error + 3e-7);
      }
    }
  }
}

TEST_CASE("decode rms_norm: one thread or two give the same bits") {
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  const auto x = torch::randn({300, 1, 256}), weight = torch::randn({256});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = cpu::decode_rms_norm(x, weight, 1e-6);
  at::set_num_threads(2);
  const auto two = cpu::decode_rms_norm(x, weight, 1e-6);
  at::set_num_threads(threads);
  REQUIRE(one.defined());
  CHECK(torch::equal(one, two));
}

TEST_CASE("decode rms_norm declines what it does not compute, and the norm's operators run") {
  if (no_kernel_here()) return;
  torch::manual_seed(9);
  const auto x = torch::randn({4, 1, 32}), weight = torch::randn({32});
  {
    torch::NoGradGuard no_grad;
    CHECK(cpu::decode_rms_norm(x, weight, 1e-6).defined());
    // bfloat16 or float64 operands
    CHECK_FALSE(cpu::decode_rms_norm(x.to(torch::kBFloat16), weight.to(torch::kBFloat16), 1e-6).defined());
    CHECK_FALSE(cpu::decode_rms_norm(x.to(torch::kFloat64), weight.to(torch::kFloat64), 1e-6).defined());
    CHECK_FALSE(cpu::decode_rms_norm(x, weight.to(torch::kBFloat16), 1e-6).defined());
    // more than one position per row (prefill, scoring), a 2-D input, or strided rows
    CHECK_FALSE(cpu::decode_rms_norm(torch::randn({4, 2, 32}), weight, 1e-6).defined());
    CHECK_FALSE(cpu::decode_rms_norm(x.view({4, 32}), weight, 1e-6).defined());
    CHECK_FALSE(cpu::decode_rms_norm(torch::randn({4, 1, 64}).narrow(2, 0, 32), weight, 1e-6).defined());
    // a weight of another size
    CHECK_FALSE(cpu::decode_rms_norm(x, torch::randn({31}), 1e-6).defined());
    // autocast lowering float32
    {
      const AutocastScope autocast(true, torch::kCPU);
      CHECK_FALSE(cpu::decode_rms_norm(x, weight, 1e-6).defined());
    }
    // switched off
    {
      const KernelOverride off(Kernel::avx2_decode_rms_norm, false);
      CHECK_FALSE(kernel_plan().on(Kernel::avx2_decode_rms_norm));
      CHECK_FALSE(cpu::decode_rms_norm(x, weight, 1e-6).defined());
    }
  }
  // gradients wanted, through x or the weight: RMSNorm's module runs rms_norm and autograd sees it
  CHECK_FALSE(cpu::decode_rms_norm(x.clone().requires_grad_(true), weight, 1e-6).defined());
  RMSNorm norm(32, 1e-6);
  const auto out = norm(x);
  CHECK(out.requires_grad());
  out.sum().backward();
  CHECK(norm->weight.grad().defined());
}

// End to end in the model (decode_kernel_checks.h): cached decode on the fused weights, kernel on and off.
TEST_CASE("decode rms_norm in the model: cached decode logits as with LibTorch's operators") {
  if (no_kernel_here()) return;
  const auto decodes = testing::check_cached_decode(Kernel::avx2_decode_rms_norm, 14);
  // and the prefill, several positions per row, kept LibTorch's operators: its logits are the same bits
  CHECK(torch::equal(decodes.with_kernel.narrow(1, 0, decodes.prefill), decodes.without.narrow(1, 0, decodes.prefill)));
}
