// folded_gqa_attention (ops/cuda): grouped-query attention as one attention per key head, the query
// heads of a group folded into its query positions. It is a composition of LibTorch's operators, so it
// runs here on the CPU against the attention it replaces on a GPU (scaled_dot_product_attention with
// enable_gqa), values and gradients; tests/devices/test_cuda_vs_cpu.cpp runs it on CUDA.
#include <catch2/catch.hpp>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/torch.h>

#include <optional>

#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "rayless/ops/kernel_plan.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
// what the reference gives: [B, T, H * D]
torch::Tensor with_enable_gqa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& allowed, double scale) {
  const std::optional<torch::Tensor> mask = allowed.defined() ? std::optional<torch::Tensor>(allowed) : std::nullopt;
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale, /*enable_gqa=*/true)
      .transpose(1, 2)
      .reshape({q.size(0), q.size(2), q.size(1) * q.size(3)});
}

// rows left-padded by b % keys positions, causal over the last `queries` positions
torch::Tensor padded_causal_mask(int64_t rows, int64_t queries, int64_t keys) {
  auto allowed = torch::ones({rows, 1, queries, keys}, torch::kBool);
  for (int64_t b = 0; b < rows; ++b) {
    allowed[b].narrow(-1, 0, b % (keys - queries + 1)).fill_(false);
    for (int64_t t = 0; t < queries; ++t) allowed[b][0][t].narrow(0, keys - queries + t + 1, queries - t - 1).fill_(false);
  }
  return allowed;
}
}  // namespace

TEST_CASE("folded_gqa_attention: the query heads folded per key head give enable_gqa's attention") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  struct Shape {
    int64_t rows, heads, kv_heads, queries, keys, dim;
  };
  // a decode step of the 0.5B Qwen2.5 shape's heads (14 over 2), prefill pieces, a mask per row or shared
  for (const Shape& s : {Shape{3, 14, 2, 1, 37, 64}, Shape{4, 4, 2, 5, 12, 16}, Shape{2, 6, 3, 7, 7, 8}, Shape{1, 8, 1, 3, 9, 32}}) {
    for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
      INFO("rows " << s.rows << ", heads " << s.heads << "/" << s.kv_heads << ", queries " << s.queries << ", keys "
                   << s.keys << ", " << dtype);
      const auto options = torch::TensorOptions().dtype(dtype);
      // q as the model hands it over: [rows, positions, heads, D] transposed (not contiguous)
      const auto q = torch::randn({s.rows, s.queries, s.heads, s.dim}, options).transpose(1, 2);
      const auto k = torch::randn({s.rows, s.kv_heads, s.keys + 4, s.dim}, options).narrow(2, 0, s.keys);
      const auto v = torch::randn({s.rows, s.kv_heads, s.keys + 4, s.dim}, options).narrow(2, 0, s.keys);
      const double scale = 1.0 / std::sqrt(double(s.dim));
      const double tolerance = dtype == torch::kFloat64 ? 1e-12 : 2e-6;
      const auto per_row = padded_causal_mask(s.rows, s.queries, s.keys);
      const auto shared = padded_causal_mask(1, s.queries, s.keys);
      const auto keys_only = per_row.narrow(2, s.queries - 1, 1);  // [rows, 1, 1, keys]: every query the same keys
      for (const auto& allowed : {per_row, shared, keys_only, torch::Tensor()}) {
        const auto folded = cuda::folded_gqa_attention(q, k, v, allowed, scale);
        REQUIRE(folded.defined());
        CHECK(folded.sizes() == torch::IntArrayRef({s.rows, s.queries, s.heads * s.dim}));
        const double error = (folded - with_enable_gqa(q, k, v, allowed, scale)).abs().max().item<double>();
        INFO("largest difference " << error);
        CHECK(error <= tolerance);
      }
    }
  }
}

TEST_CASE("folded_gqa_attention: declines where LibTorch's kernels already serve, and with its switch off") {
  torch::NoGradGuard no_grad;
  const auto q = torch::randn({2, 4, 1, 8}), k = torch::randn({2, 2, 6, 8}), v = torch::randn({2, 2, 6, 8});
  const auto allowed = torch::ones({2, 1, 1, 6}, torch::kBool);
  CHECK(cuda::folded_gqa_attention(q, k, v, allowed, 0.3).defined());
  // as many key heads as query heads: nothing to fold
  CHECK_FALSE(cuda::folded_gqa_attention(torch::randn({2, 2, 1, 8}), k, v, allowed, 0.3).defined());
  const KernelOverride off(Kernel::folded_gqa_attention, false);
  CHECK_FALSE(cuda::folded_gqa_attention(q, k, v, allowed, 0.3).defined());
}

// The training pass on a GPU: the gradients of q, k and v through the folded attention are enable_gqa's.
TEST_CASE("folded_gqa_attention: gradients as enable_gqa's, in float64") {
  torch::manual_seed(6);
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  const int64_t rows = 3, heads = 6, kv_heads = 2, queries = 5, keys = 9, dim = 8;
  const auto allowed = padded_causal_mask(rows, queries, keys);
  const auto upstream = torch::randn({rows, queries, heads * dim}, options);
  std::vector<torch::Tensor> grads[2];
  for (const bool folded : {true, false}) {
    torch::manual_seed(7);  // the same q, k, v
    auto q = torch::randn({rows, heads, queries, dim}, options).requires_grad_(true);
    auto k = torch::randn({rows, kv_heads, keys, dim}, options).requires_grad_(true);
    auto v = torch::randn({rows, kv_heads, keys, dim}, options).requires_grad_(true);
    const auto out = folded ? cuda::folded_gqa_attention(q, k, v, allowed, 0.35) : with_enable_gqa(q, k, v, allowed, 0.35);
    REQUIRE(out.defined());
    (out * upstream).sum().backward();
    grads[folded ? 0 : 1] = {q.grad(), k.grad(), v.grad()};
  }
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient of " << "qkv"[i]);
    CHECK((grads[0][i] - grads[1][i]).abs().max().item<double>() <= 1e-12);
    CHECK(grads[1][i].abs().max().item<double>() > 0.0);
  }
}

TEST_CASE("folded_gqa_attention: the CUDA backend's padded attention, the CPU's untouched") {
  CHECK(backend_for(torch::Device(torch::kCUDA, 0)).padded_attention == &cuda::folded_gqa_attention);
  CHECK(backend_for(torch::kCPU).padded_attention != &cuda::folded_gqa_attention);
}
