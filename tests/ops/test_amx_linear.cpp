// The AMX tile kernel of the decode step's bfloat16 products (amx_linear, ops/cpu/x86/amx) against a
// float64 sum of the same bfloat16 operands and against oneDNN's packed kernel, which it replaces.
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <string>

#include "ops/cpu/x86/amx/amx_kernels.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
// Where the tile kernel cannot run (no AMX, or a kernel that does not grant it), says so.
bool no_tiles_here() {
  if (kernel_plan().on(Kernel::amx_linear)) return false;
  WARN("this CPU (or kernel) has no AMX tiles: the tile kernel is not exercised here");
  return true;
}
}  // namespace

TEST_CASE("amx: the tile layout takes weights of 64-output blocks and 32-input chunks only") {
  CHECK(amx::fits(64, 32));
  CHECK(amx::fits(3584, 640));
  CHECK_FALSE(amx::fits(100, 640));
  CHECK_FALSE(amx::fits(64, 48));
  CHECK_FALSE(amx::fits(0, 32));
}

TEST_CASE("amx: tile products equal a float64 sum to bfloat16 rounding and oneDNN's packed kernel") {
  if (no_tiles_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  for (const auto& [out, in] : {std::pair<int64_t, int64_t>{64, 32}, {128, 64}, {896, 640}, {640, 1792}, {3584, 640}}) {
    const auto weight = (0.1 * torch::randn({out, in})).to(torch::kBFloat16);
    const auto bias = torch::randn({out}).to(torch::kBFloat16);
    const auto packed = amx::pack({weight});
    REQUIRE(packed.numel() == out * in);
    for (const int64_t rows : {1, 3, 16, 17, 40}) {
      const auto x = torch::randn({rows, in}).to(torch::kBFloat16);
      for (const bool with_bias : {false, true}) {
        INFO("[" << rows << ", " << in << "] x [" << out << ", " << in << "]^T" << (with_bias ? " + bias" : ""));
        const auto y = amx::linear(x, packed, out, with_bias ? bias : torch::Tensor());
        REQUIRE(y.sizes() == torch::IntArrayRef({rows, out}));
        REQUIRE(y.scalar_type() == torch::kBFloat16);
        auto exact = torch::mm(x.to(torch::kFloat64), weight.to(torch::kFloat64).t());
        if (with_bias) exact = exact + bias.to(torch::kFloat64);
        // rounding to bfloat16 (half a unit in the last place: at most 2^-8 relative) and float32 sums of
        // `in` products (bounded by in * 2^-24 * sum of |products|)
        const auto magnitude = torch::mm(x.to(torch::kFloat64).abs(), weight.to(torch::kFloat64).abs().t());
        const auto sum_error = magnitude * (double(in) * std::ldexp(1.0, -24));
        const auto bound = exact.abs() * std::ldexp(1.0, -8) + sum_error;
        const auto excess = ((y.to(torch::kFloat64) - exact).abs() - bound).max().item<double>();
        CHECK(excess <= 0);
        // oneDNN's packed kernel (what GenerationLinear runs without the tiles) sums the same products in
        // float32 in its own order: the two differ by at most one bfloat16 step of the result beyond
        // both sums' float32 error
        KernelOverride off(Kernel::amx_linear, false);
        const GenerationLinear onednn({weight}, {with_bias ? bias : torch::Tensor()}, torch::kBFloat16);
        REQUIRE(std::string(onednn.kernel()) == "onednn_linear");
        const auto reference = onednn(x).to(torch::kFloat64);
        const auto step = torch::max(reference.abs(), y.to(torch::kFloat64).abs()) * std::ldexp(1.0, -7);
        const double identical = (y.to(torch::kFloat64) == reference).to(torch::kFloat64).mean().item<double>();
        CAPTURE(identical);  // shown with -s: the share of outputs with the same bits
        CHECK(((y.to(torch::kFloat64) - reference).abs() - step - 2 * sum_error).max().item<double>() <= 0);
      }
    }
  }
}

TEST_CASE("amx: two threads split the output blocks and give one thread's bits") {
  if (no_tiles_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  const auto weight = (0.1 * torch::randn({640, 1792})).to(torch::kBFloat16);
  const auto bias = torch::randn({640}).to(torch::kBFloat16);
  const auto x = torch::randn({21, 1792}).to(torch::kBFloat16);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto packed = amx::pack({weight});
  const auto one = amx::linear(x, packed, 640, bias);
  at::set_num_threads(2);  // each thread loads its own tile configuration
  const auto packed_by_two = amx::pack({weight});
  const auto two = amx::linear(x, packed_by_two, 640, bias);
  at::set_num_threads(threads);
  CHECK(torch::equal(packed, packed_by_two));
  CHECK(torch::equal(one, two));
}

TEST_CASE("amx: GenerationLinear runs fused bfloat16 weights on the tiles where they fit, oneDNN elsewhere") {
  if (no_tiles_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  // q/k/v-like parts (float32 parameters, as the model holds them) fused into one [192, 64] product
  const std::vector<torch::Tensor> weights{torch::randn({128, 64}), torch::randn({32, 64}), torch::randn({32, 64})};
  const std::vector<torch::Tensor> biases{torch::randn({128}), torch::randn({32}), torch::randn({32})};
  // the parts cast and laid out in one pass: the same bits as casting their concatenation first
  CHECK(torch::equal(amx::pack(weights), amx::pack({torch::cat(weights).to(torch::kBFloat16)})));
  const GenerationLinear tiles(weights, biases, torch::kBFloat16);
  CHECK(std::string(tiles.kernel()) == "amx_linear");
  const auto x = torch::randn({2, 5, 64});  // float32 input, cast as autocast would
  const auto y = tiles(x);
  CHECK(y.sizes() == torch::IntArrayRef({2, 5, 192}));
  CHECK(y.scalar_type() == torch::kBFloat16);
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < weights.size(); ++i)
    parts.push_back(torch::linear(x.to(torch::kBFloat16).to(torch::kFloat64), weights[i].to(torch::kBFloat16).to(torch::kFloat64),
                                  biases[i].to(torch::kBFloat16).to(torch::kFloat64)));
  const auto exact = torch::cat(parts, -1);
  CHECK(((y.to(torch::kFloat64) - exact).abs() - exact.abs() * std::ldexp(1.0, -8) - 1e-4).max().item<double>() <= 0);
  // 100 outputs do not fill 64-output blocks: oneDNN's packed weight, same results within rounding
  const GenerationLinear odd({torch::randn({100, 64})}, {torch::Tensor()}, torch::kBFloat16);
  CHECK(std::string(odd.kernel()) == "onednn_linear");
  // float32 generation never takes the bfloat16 tiles
  const GenerationLinear float32(weights, biases, torch::kFloat32);
  CHECK(std::string(float32.kernel()) != "amx_linear");
  {
    KernelOverride off(Kernel::amx_linear, false);
    CHECK(std::string(GenerationLinear(weights, biases, torch::kBFloat16).kernel()) == "onednn_linear");
  }
}
