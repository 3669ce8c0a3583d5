// Generation's one-pass float32 silu(gate) * up (avx2_decode_silu_times, ops/cpu/x86/avx2) against the
// same product in float64 and LibTorch's silu and mul, which it replaces; where it declines to run; and
// a model's cached decode with it against the model without it.
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <vector>

#include "rayless/ops/autocast_scope.h"
#include "ops/cpu/cpu_backend.h"
#include "decode_kernel_checks.h"
#include "rayless/model/model.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
bool no_kernel_here() { return testing::kernel_missing(kernel_plan().on(Kernel::avx2_decode_silu_times), "decode silu*up"); }

torch::Tensor libtorch_silu_times(const torch::Tensor& gate_up) {
  const int64_t half = gate_up.size(-1) / 2;
  return torch::silu(gate_up.narrow(-1, 0, half)) * gate_up.narrow(-1, half, half);
}

// the largest error relative to the exact value at that element (testing::relative_error's floor)
double relative_error(const torch::Tensor& out, const torch::Tensor& exact) {
  return testing::relative_error(out, exact, 1e-30);
}
}  // namespace

TEST_CASE("decode silu*up: float64's silu(gate) * up to a few float32 ulps, as near as LibTorch's") {
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(11);
  // the tiny and small benchmark models' intermediate sizes; sizes with a remainder past 8 floats
  for (const int64_t half : {704, 1792, 13, 5, 1}) {
    for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{1, 1}, {16, 1}, {3, 7}}) {
      INFO("rows " << rows[0] << " x " << rows[1] << ", intermediate " << half);
      // gates from -90 to 90, past where e^-gate leaves float's range
      const auto gate_up = torch::randn({rows[0], rows[1], 2 * half}) * 30;
      gate_up.narrow(-1, 0, half).clamp_(-90, 90);
      const auto out = cpu::decode_silu_times(gate_up);
      REQUIRE(out.defined());
      REQUIRE(out.sizes() == torch::IntArrayRef{rows[0], rows[1], half});
      REQUIRE(out.scalar_type() == torch::kFloat32);
      const auto wide = gate_up.to(torch::kFloat64);
      const auto exact = torch::silu(wide.narrow(-1, 0, half)) * wide.narrow(-1, half, half);
      // where silu's value is a normal float: below that both give 0 or a subnormal
      const auto normal = exact.abs() > 1e-30;
      const auto pick = [&](const torch::Tensor& t) { return t.masked_select(normal); };
      const double error = relative_error(pick(out), pick(exact));
      const double libtorch_error = relative_error(pick(libtorch_silu_times(gate_up)), pick(exact));
      CAPTURE(error, libtorch_error);
      // e^x within 2 ulp, then an add, a division and a product: a few ulps (6e-8 each)
      CHECK(error < 4e-7);
      CHECK(error <= 2 * libtorch_error + 2.4e-7);
      CHECK((out - libtorch_silu_times(gate_up)).abs().max().item<double>() < 1e-4);
    }
  }
}

TEST_CASE("decode silu*up: gates at the edges of float's range, and one thread or two give the same bits") {
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  constexpr float inf = std::numeric_limits<float>::infinity();
  const auto gate = torch::tensor({-inf, -1000.0f, -88.5f, -20.0f, 0.0f, 20.0f, 1000.0f, inf, 3.0f});
  const auto gate_up = torch::cat({gate, torch::ones({9})}).view({1, 1, 18});
  const auto out = cpu::decode_silu_times(gate_up).view({9});
  // LibTorch's silu gives the same at these: -inf / (1 + inf) is NaN there too
  const auto libtorch = libtorch_silu_times(gate_up).view({9});
  for (int64_t i = 0; i < 9; ++i) {
    INFO("gate " << gate[i].item<float>() << ": kernel " << out[i].item<float>() << ", LibTorch "
                 << libtorch[i].item<float>());
    if (std::isnan(libtorch[i].item<float>())) {
      CHECK(std::isnan(out[i].item<float>()));
    } else {
      const float got = out[i].item<float>(), want = libtorch[i].item<float>();
      CHECK((got == want || std::abs(got - want) <= 1e-6f * std::abs(want) + 1e-30f));
    }
  }
  torch::manual_seed(12);
  const auto many = torch::randn({100, 1, 2 * 704});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = cpu::decode_silu_times(many);
  at::set_num_threads(2);
  const auto two = cpu::decode_silu_times(many);
  at::set_num_threads(threads);
  CHECK(torch::equal(one, two));
}

TEST_CASE("decode silu*up declines what it does not compute") {
  if (no_kernel_here()) return;
  torch::manual_seed(13);
  const auto gate_up = torch::randn({4, 1, 64});
  {
    torch::NoGradGuard no_grad;
    CHECK(cpu::decode_silu_times(gate_up).defined());
    CHECK_FALSE(cpu::decode_silu_times(gate_up.to(torch::kBFloat16)).defined());
    CHECK_FALSE(cpu::decode_silu_times(gate_up.to(torch::kFloat64)).defined());
    // an odd width, or a strided input
    CHECK_FALSE(cpu::decode_silu_times(torch::randn({4, 1, 63})).defined());
    CHECK_FALSE(cpu::decode_silu_times(torch::randn({4, 1, 128}).narrow(2, 0, 64)).defined());
    {
      const AutocastScope autocast(true, torch::kCPU);
      CHECK_FALSE(cpu::decode_silu_times(gate_up).defined());
    }
    {
      const KernelOverride off(Kernel::avx2_decode_silu_times, false);
      CHECK_FALSE(kernel_plan().on(Kernel::avx2_decode_silu_times));
      CHECK_FALSE(cpu::decode_silu_times(gate_up).defined());
    }
  }
  CHECK_FALSE(cpu::decode_silu_times(gate_up.clone().requires_grad_(true)).defined());
}

// End to end in the model (decode_kernel_checks.h): cached decode on the fused weights, kernel on and off.
TEST_CASE("decode silu*up in the model: cached decode logits as with LibTorch's silu and mul") {
  if (no_kernel_here()) return;
  testing::check_cached_decode(Kernel::avx2_decode_silu_times, 15);
}
