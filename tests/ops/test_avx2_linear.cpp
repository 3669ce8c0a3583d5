// The AVX2 rows kernel of the decode step's float32 products (avx2_linear, ops/cpu/x86/avx2) against a
// scalar loop with the same fused multiply-adds in the same order (bit for bit), a float64 sum, and
// oneDNN's packed kernel and MKL's product, which it replaces. The plan prefers oneDNN's kernel on CPUs
// with AVX-512; these tests turn the rows kernel on wherever the CPU can run it.
#include <catch2/catch.hpp>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>

#include <string>

#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
// The rows kernel on while alive, wherever this CPU can run it.
struct RowsKernel {
  KernelOverride on{Kernel::avx2_linear, true};
};

bool no_kernel_here() {
  if (kernel_plan().on(Kernel::avx2_linear)) return false;
  WARN("this CPU lacks AVX2 with FMA: the AVX2 rows kernel is not exercised here");
  return true;
}

// y[r, n] = fma(x[r, in-1], w[n, in-1], ... fma(x[r, 0], w[n, 0], 0)) + bias[n], in float32
torch::Tensor fma_chain(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  auto y = torch::empty({rows, out});
  const float* xs = x.data_ptr<float>();
  const float* ws = w.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < out; ++n) {
      float sum = 0.0f;
      for (int64_t q = 0; q < in; ++q) sum = std::fma(xs[r * in + q], ws[n * in + q], sum);
      ys[r * out + n] = bias.defined() ? sum + bias.data_ptr<float>()[n] : sum;
    }
  return y;
}
}  // namespace

TEST_CASE("avx2: rows kernel gives a scalar FMA chain's bits, within float32 sum error of float64") {
  const RowsKernel rows_kernel_on;
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  // 100 and 40 outputs leave the last 16-output block part-filled
  for (const auto& [out, in] : {std::pair<int64_t, int64_t>{16, 8}, {100, 64}, {40, 33}, {896, 640}, {640, 1792}}) {
    const auto weight = 0.1 * torch::randn({out, in});
    const auto bias = torch::randn({out});
    const auto packed = avx2::pack({weight});
    REQUIRE(packed.numel() == (out + 15) / 16 * 16 * in);
    for (const int64_t rows : {1, 2, 5, 6, 7, 16, 17, 40}) {
      const auto x = torch::randn({rows, in});
      for (const bool with_bias : {false, true}) {
        INFO("[" << rows << ", " << in << "] x [" << out << ", " << in << "]^T" << (with_bias ? " + bias" : ""));
        const auto b = with_bias ? bias : torch::Tensor();
        const auto y = avx2::linear(x, packed, out, b);
        REQUIRE(y.sizes() == torch::IntArrayRef({rows, out}));
        CHECK(torch::equal(y, fma_chain(x, weight, b)));
        auto exact = torch::mm(x.to(torch::kFloat64), weight.to(torch::kFloat64).t());
        if (with_bias) exact = exact + bias.to(torch::kFloat64);
        auto magnitude = torch::mm(x.to(torch::kFloat64).abs(), weight.to(torch::kFloat64).abs().t());
        if (with_bias) magnitude = magnitude + bias.to(torch::kFloat64).abs();  // the bias's addition rounds too
        const auto sum_error = magnitude * (double(in + 1) * std::ldexp(1.0, -24));
        CHECK(((y.to(torch::kFloat64) - exact).abs() - sum_error).max().item<double>() <= 0);
        // MKL's product (torch::linear, what the separate projections run) sums in its own order
        const auto mkl = torch::linear(x, weight, b).to(torch::kFloat64);
        CHECK(((y.to(torch::kFloat64) - mkl).abs() - 2 * sum_error).max().item<double>() <= 0);
      }
    }
  }
}

TEST_CASE("avx2: two threads split the output blocks and give one thread's bits") {
  const RowsKernel rows_kernel_on;
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(7);
  const std::vector<torch::Tensor> parts{torch::randn({640, 1792}), torch::randn({72, 1792})};
  const auto bias = torch::randn({712});
  const auto x = torch::randn({21, 1792});
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto packed = avx2::pack(parts);
  const auto one = avx2::linear(x, packed, 712, bias);
  at::set_num_threads(2);
  const auto packed_by_two = avx2::pack(parts);
  const auto two = avx2::linear(x, packed_by_two, 712, bias);
  at::set_num_threads(threads);
  CHECK(torch::equal(packed, packed_by_two));
  CHECK(torch::equal(one, two));
  // the parts laid out in place: the same as packing their concatenation
  CHECK(torch::equal(packed, avx2::pack({torch::cat(parts)})));
}

TEST_CASE("avx2: GenerationLinear runs fused float32 weights on the rows kernel at every row count") {
  const RowsKernel rows_kernel_on;
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const std::vector<torch::Tensor> weights{torch::randn({128, 64}), torch::randn({32, 64}), torch::randn({32, 64})};
  const std::vector<torch::Tensor> biases{torch::randn({128}), torch::randn({32}), torch::randn({32})};
  const GenerationLinear rows_kernel(weights, biases, torch::kFloat32);
  CHECK(std::string(rows_kernel.kernel()) == "avx2_linear");
  for (const int64_t rows : {1, 3, 16}) {
    const auto x = torch::randn({rows, 5, 64});
    const auto y = rows_kernel(x);
    REQUIRE(y.sizes() == torch::IntArrayRef({rows, 5, 192}));
    std::vector<torch::Tensor> parts;
    for (size_t i = 0; i < weights.size(); ++i) parts.push_back(torch::linear(x, weights[i], biases[i]));
    CHECK(torch::allclose(y, torch::cat(parts, -1), 1e-5, 1e-4));
  }
  // bfloat16 products widened to float32 take it too; bfloat16 products and the switch do not
  {
    const BFloat16ProductsScope widened(BFloat16Products::float32);
    CHECK(std::string(GenerationLinear(weights, biases, torch::kBFloat16).kernel()) == "avx2_linear");
  }
  {
    const BFloat16ProductsScope emulated(BFloat16Products::bfloat16);
    CHECK(std::string(GenerationLinear(weights, biases, torch::kBFloat16).kernel()) != "avx2_linear");
  }
  const KernelOverride off(Kernel::avx2_linear, false);
  const GenerationLinear onednn(weights, biases, torch::kFloat32);
  CHECK(std::string(onednn.kernel()) == "onednn_linear");
  const auto x = torch::randn({16, 64});
  CHECK(torch::allclose(rows_kernel(x), onednn(x), 1e-5, 1e-4));
}
