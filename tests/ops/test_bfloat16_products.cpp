// The bfloat16 products of train.bf16_products (ops.h): widened products against the float32 formula they stand for (bit for bit),
// against LibTorch's own bfloat16 kernels (within the float32 sums' rounding) and against the exact
// product (float64); the setting's parsing and its effect under autocast.
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>

#include "rayless/ops/ops.h"
#include "rayless/base/cpu_features.h"

using rayless::ops::BFloat16Products;
using rayless::ops::BFloat16ProductsScope;

namespace {

torch::Tensor random_bfloat16(std::vector<int64_t> sizes, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn(sizes, generator, torch::kFloat32).to(torch::kBFloat16);
}

// one bfloat16 step at |want| per element (2^(exponent - 7))
torch::Tensor bfloat16_step(const torch::Tensor& want) {
  const auto w = want.to(torch::kFloat64);
  return torch::pow(2.0, torch::floor(torch::log2(w.abs().clamp_min(1e-30))) - 7);
}

// bfloat16 autocast on the CPU while alive
struct CpuAutocast {
  CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  }
  ~CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
};

}  // namespace

TEST_CASE("bfloat16_products: float32 products are the widened operands' float32 product, rounded once") {
  // at this size LibTorch's kernel sums in another order than float32's on an AMD EPYC (a few of the
  // 32768 elements differ); at smaller ones the two agreed bit for bit there
  const auto a = random_bfloat16({128, 640}, 1), b = random_bfloat16({640, 256}, 2);
  const auto exact = a.to(torch::kFloat64).mm(b.to(torch::kFloat64));
  torch::Tensor widened, native;
  {
    BFloat16ProductsScope float32(BFloat16Products::float32);
    widened = rayless::ops::bfloat16_aware_mm(a, b);
  }
  {
    BFloat16ProductsScope bfloat16(BFloat16Products::bfloat16);
    native = rayless::ops::bfloat16_aware_mm(a, b);
  }
  REQUIRE(widened.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(native, a.mm(b)));  // the bfloat16 setting is LibTorch's kernel itself
  CHECK(torch::equal(widened, a.to(torch::kFloat32).mm(b.to(torch::kFloat32)).to(torch::kBFloat16)));
  // one rounding of a float32 sum: half a bfloat16 step from the exact product, plus the float32
  // sum's own error (a few float32 steps of sum |a||b|, which matters only where the sum cancels)
  const auto step = bfloat16_step(exact);
  const auto sum_error = a.to(torch::kFloat64).abs().mm(b.to(torch::kFloat64).abs()) * std::ldexp(1.0, -20);
  const auto error = (widened.to(torch::kFloat64) - exact).abs();
  INFO("largest error " << (error / step).max().item<double>() << " bfloat16 steps");
  CHECK((error <= 0.5 * step + sum_error).all().item<bool>());
  CHECK((error <= 0.5 * step).to(torch::kFloat64).mean().item<double>() >= 0.95);
  // LibTorch's bfloat16 kernel does the same arithmetic in another order: its elements are the
  // widened ones, or a neighbouring bfloat16 value
  const auto apart = (widened.to(torch::kFloat64) - native.to(torch::kFloat64)).abs();
  INFO("widened vs LibTorch's bfloat16 kernel: " << (apart > 0).sum().item<int64_t>() << " of " << apart.numel()
                                                 << " elements differ");
  CHECK((apart <= step + 2 * sum_error).all().item<bool>());
  CHECK((apart == 0).to(torch::kFloat64).mean().item<double>() >= 0.9);
}

TEST_CASE("bfloat16_products: linear with a bias adds it before the one rounding, float32 operands are untouched") {
  const auto x = random_bfloat16({3, 5, 64}, 3), weight = random_bfloat16({40, 64}, 4), bias = random_bfloat16({40}, 5);
  BFloat16ProductsScope float32(BFloat16Products::float32);
  const auto y = rayless::ops::bfloat16_aware_linear(x, weight, bias);
  CHECK(torch::equal(y, torch::linear(x.to(torch::kFloat32), weight.to(torch::kFloat32), bias.to(torch::kFloat32))
                            .to(torch::kBFloat16)));
  CHECK(y.sizes() == torch::IntArrayRef({3, 5, 40}));
  // float32 operands are not bfloat16 products: torch::linear itself
  const auto xf = x.to(torch::kFloat32), wf = weight.to(torch::kFloat32);
  CHECK_FALSE(rayless::ops::widens_bfloat16_product(xf, wf));
  CHECK(torch::equal(rayless::ops::bfloat16_aware_linear(xf, wf, torch::Tensor()), torch::linear(xf, wf)));
}

TEST_CASE("bfloat16_products: under autocast, linear_as_autocast widens a float32 weight's product and autocast does not lower it again") {
  // float32 values off the bfloat16 grid; a size where LibTorch's bfloat16 kernel and float32's differ
  const auto x = random_bfloat16({128, 640}, 6).to(torch::kFloat32).add_(0.001);
  const auto weight = random_bfloat16({256, 640}, 7).to(torch::kFloat32).mul_(1.0001);
  const auto low = torch::kBFloat16;
  // autocast's linear: the operands cast to bfloat16, then the product
  const auto widened_by_hand =
      torch::linear(x.to(low).to(torch::kFloat32), weight.to(low).to(torch::kFloat32)).to(low);
  torch::Tensor widened, native, autocast_itself;
  {
    CpuAutocast autocast;
    {
      BFloat16ProductsScope float32(BFloat16Products::float32);
      widened = rayless::ops::linear_as_autocast(x, weight, torch::Tensor());
    }
    BFloat16ProductsScope bfloat16(BFloat16Products::bfloat16);
    native = rayless::ops::linear_as_autocast(x, weight, torch::Tensor());
    autocast_itself = torch::linear(x, weight);
  }
  CHECK(torch::equal(widened, widened_by_hand));
  CHECK(torch::equal(native, autocast_itself));
  // without autocast it is torch::linear in float32, whatever the setting
  BFloat16ProductsScope float32(BFloat16Products::float32);
  CHECK(torch::equal(rayless::ops::linear_as_autocast(x, weight, torch::Tensor()), torch::linear(x, weight)));
}

TEST_CASE("bfloat16_products: train.bf16_products names the setting, auto follows the CPU's bfloat16 units") {
  CHECK(rayless::ops::bfloat16_products_for("bfloat16") == BFloat16Products::bfloat16);
  CHECK(rayless::ops::bfloat16_products_for("float32") == BFloat16Products::float32);
  CHECK(rayless::ops::bfloat16_products_for("auto") ==
        (rayless::cpu_has_bfloat16_units() ? BFloat16Products::bfloat16 : BFloat16Products::float32));
  CHECK_THROWS_WITH(rayless::ops::bfloat16_products_for("fast"), Catch::Contains("train.bf16_products = \"fast\""));
  CHECK(std::string(rayless::ops::to_string(BFloat16Products::float32)) == "float32");
  CHECK(rayless::ops::bfloat16_products() == BFloat16Products::bfloat16);  // the default, until the trainer sets it
}
