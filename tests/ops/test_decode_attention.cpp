// The decode step's one-pass float32 attention (avx2_decode_attention, ops/cpu/x86/avx2) against the
// same attention in float64 and LibTorch's scaled_dot_product_attention, which it replaces; where it
// declines to run; and a model's cached decode with it against the model without it.
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
bool no_kernel_here() { return testing::kernel_missing(kernel_plan().on(Kernel::avx2_decode_attention), "decode attention"); }

// softmax over the allowed keys of q . k * scale, times v, in float64: [B, 1, H * D]
torch::Tensor exact_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& allowed, double scale) {
  const int64_t heads = q.size(1), group = heads / k.size(1);
  const auto wide_k = k.to(torch::kFloat64).repeat_interleave(group, 1);  // [B, H, S, D]
  const auto wide_v = v.to(torch::kFloat64).repeat_interleave(group, 1);
  auto scores = torch::matmul(q.to(torch::kFloat64), wide_k.transpose(2, 3)) * scale;  // [B, H, 1, S]
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  const auto out = torch::matmul(torch::softmax(scores, -1), wide_v);                 // [B, H, 1, D]
  return out.transpose(1, 2).reshape({q.size(0), 1, heads * q.size(3)});
}

// What the model passes for a decode step: q [B, H, 1, D], k and v the first `keys` positions of a
// cache of `capacity` (strided views), the mask left-padding row b by b % keys positions.
struct DecodeOperands {
  torch::Tensor q, k, v, allowed;
};
DecodeOperands decode_operands(int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, int64_t keys,
                               int64_t capacity) {
  DecodeOperands o;
  o.q = torch::randn({rows, heads, 1, dim});
  o.k = torch::randn({rows, kv_heads, capacity, dim}).narrow(2, 0, keys);
  o.v = torch::randn({rows, kv_heads, capacity, dim}).narrow(2, 0, keys);
  auto allowed = torch::ones({rows, 1, 1, keys}, torch::kBool);
  for (int64_t b = 0; b < rows; ++b) allowed[b].narrow(-1, 0, b % keys).fill_(false);
  o.allowed = allowed;
  return o;
}
}  // namespace

TEST_CASE("decode attention: float64's softmax(q k^T) v to float32 rounding, as near as LibTorch's") {
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  struct Shape {
    int64_t rows, heads, kv_heads, dim, keys;
  };
  // the tiny and small benchmark models' heads; head sizes with a remainder past 16 and 8 floats
  for (const Shape& s : {Shape{16, 4, 2, 64, 40}, Shape{3, 10, 2, 64, 97}, Shape{2, 2, 2, 12, 5}, Shape{5, 6, 3, 24, 33},
                         Shape{1, 1, 1, 7, 1}, Shape{4, 8, 1, 128, 300}}) {
    INFO("rows " << s.rows << ", heads " << s.heads << "/" << s.kv_heads << ", dim " << s.dim << ", keys " << s.keys);
    const auto o = decode_operands(s.rows, s.heads, s.kv_heads, s.dim, s.keys, s.keys + 11);
    const double scale = 1.0 / std::sqrt(double(s.dim));
    const auto out = cpu::decode_attention(o.q, o.k, o.v, o.allowed, scale);
    REQUIRE(out.defined());
    REQUIRE(out.sizes() == torch::IntArrayRef{s.rows, 1, s.heads * s.dim});
    REQUIRE(out.scalar_type() == torch::kFloat32);
    const auto exact = exact_attention(o.q, o.k, o.v, o.allowed, scale);
    const auto libtorch = at::scaled_dot_product_attention(o.q, o.k, o.v, o.allowed, 0.0, false, scale,
                                                           s.kv_heads != s.heads)
                              .transpose(1, 2)
                              .reshape({s.rows, 1, s.heads * s.dim});
    const double error = (out.to(torch::kFloat64) - exact).abs().max().item<double>();
    const double libtorch_error = (libtorch.to(torch::kFloat64) - exact).abs().max().item<double>();
    CAPTURE(error, libtorch_error);
    // outputs are averages of N(0, 1) values: float32 rounding of a few terms of size ~1
    CHECK(error < 2e-6);
    CHECK(error <= 4 * libtorch_error + 1e-7);
    CHECK((out - libtorch).abs().max().item<double>() < 2e-6);
  }
}

TEST_CASE("decode attention: a mask shared by all rows, and one thread or two give the same bits") {
  if (no_kernel_here()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const auto o = decode_operands(16, 10, 2, 64, 70, 128);
  const double scale = 0.125;
  // a [1, 1, 1, S] mask broadcast over the rows, as a sliding window's or an unpadded batch's may be
  auto shared = torch::ones({1, 1, 1, 70}, torch::kBool);
  shared.narrow(-1, 0, 9).fill_(false);
  const auto broadcast = cpu::decode_attention(o.q, o.k, o.v, shared, scale);
  REQUIRE(broadcast.defined());
  CHECK((broadcast.to(torch::kFloat64) - exact_attention(o.q, o.k, o.v, shared.expand({16, 1, 1, 70}), scale))
            .abs()
            .max()
            .item<double>() < 2e-6);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = cpu::decode_attention(o.q, o.k, o.v, o.allowed, scale);
  at::set_num_threads(2);
  const auto two = cpu::decode_attention(o.q, o.k, o.v, o.allowed, scale);
  at::set_num_threads(threads);
  CHECK(torch::equal(one, two));
}

TEST_CASE("decode attention declines what it does not compute, and the caller's attention runs") {
  if (no_kernel_here()) return;
  torch::manual_seed(5);
  const auto o = decode_operands(3, 4, 2, 16, 9, 9);
  const double scale = 0.25;
  {
    torch::NoGradGuard no_grad;
    CHECK(cpu::decode_attention(o.q, o.k, o.v, o.allowed, scale).defined());
    // bfloat16 or float64 operands
    CHECK_FALSE(cpu::decode_attention(o.q.to(torch::kBFloat16), o.k.to(torch::kBFloat16), o.v.to(torch::kBFloat16),
                                 o.allowed, scale)
                    .defined());
    CHECK_FALSE(cpu::decode_attention(o.q.to(torch::kFloat64), o.k.to(torch::kFloat64), o.v.to(torch::kFloat64),
                                 o.allowed, scale)
                    .defined());
    // two queries per row
    CHECK_FALSE(cpu::decode_attention(torch::cat({o.q, o.q}, 2), o.k, o.v, o.allowed.expand({3, 1, 2, 9}), scale).defined());
    // heads not a multiple of the kv heads
    CHECK_FALSE(cpu::decode_attention(torch::randn({3, 3, 1, 16}), o.k, o.v, o.allowed, scale).defined());
    // a float mask, or keys strided along D
    CHECK_FALSE(cpu::decode_attention(o.q, o.k, o.v, o.allowed.to(torch::kFloat32), scale).defined());
    CHECK_FALSE(cpu::decode_attention(o.q, o.k.transpose(2, 3).contiguous().transpose(2, 3), o.v, o.allowed, scale).defined());
    // a row with no key it may attend to
    auto none = o.allowed.clone();
    none[1].fill_(false);
    CHECK_FALSE(cpu::decode_attention(o.q, o.k, o.v, none, scale).defined());
    // autocast lowering float32: the attention computes in bfloat16 there
    {
      const AutocastScope autocast(true, torch::kCPU);
      CHECK_FALSE(cpu::decode_attention(o.q, o.k, o.v, o.allowed, scale).defined());
    }
    // switched off
    {
      const KernelOverride off(Kernel::avx2_decode_attention, false);
      CHECK_FALSE(kernel_plan().on(Kernel::avx2_decode_attention));
      CHECK_FALSE(cpu::decode_attention(o.q, o.k, o.v, o.allowed, scale).defined());
    }
  }
  // gradients wanted
  const auto q = o.q.clone().requires_grad_(true);
  CHECK_FALSE(cpu::decode_attention(q, o.k, o.v, o.allowed, scale).defined());
}

// End to end in the model (decode_kernel_checks.h): cached decode on the fused weights, kernel on and off.
TEST_CASE("decode attention in the model: cached decode logits as with LibTorch's attention") {
  if (no_kernel_here()) return;
  testing::check_cached_decode(Kernel::avx2_decode_attention, 13);
}
