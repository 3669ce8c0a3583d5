// The decode step's one-pass rotary embedding against the operators it replaces, bit for bit.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "rayless/ops/autocast_scope.h"
#include "ops/cpu/cpu_backend.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// What AttentionImpl::forward computes for one position with LibTorch's operators: the padded
// layout [B, heads, 1, D], `x * cos + rotate_half(x) * sin`, then the cast the attention (q) or the
// cache (k) makes under autocast.
torch::Tensor by_operators(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto padded = x.view({x.size(0), 1, x.size(1), x.size(2)}).transpose(1, 2);
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  const auto out = padded * c + rotate_half(padded) * s;
  return out.to(autocast_compute_dtype(out.device().type(), out.scalar_type()));
}

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && torch::equal(a.contiguous(), b.contiguous());
}
}  // namespace

TEST_CASE("rotate_for_decoding gives the rotary operators' bits, float32 and under bfloat16 autocast") {
  torch::manual_seed(3);
  const int64_t rows = 5, heads = 4, kv_heads = 2, dim = 64;
  // tables as the rotary embedding gives them for one position per row, large angles included
  const auto angles = torch::rand({rows, 1, dim}) * 400.0;
  const auto cos = angles.cos(), sin = angles.sin();
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const bool autocast_on : {false, true}) {
      CAPTURE(dtype, autocast_on);
      const AutocastScope autocast(autocast_on, torch::kCPU);
      // q and k as the fused q/k/v projection leaves them: strided views of one [B, H + 2 H_kv, D]
      const auto qkv = (torch::randn({rows, heads + 2 * kv_heads, dim}) * 3.0).to(dtype);
      const auto q = qkv.narrow(1, 0, heads), k = qkv.narrow(1, heads, kv_heads);
      REQUIRE(cpu::rotates_for_decoding(q, k, cos, sin));
      const auto out_dtype = autocast_compute_dtype(torch::kCPU, torch::kFloat32);
      const auto [q_rot, k_rot] = cpu::rotate_for_decoding(q, k, cos, sin, out_dtype);
      CHECK(same_bits(q_rot, by_operators(q, cos, sin)));
      CHECK(same_bits(k_rot, by_operators(k, cos, sin)));
      CHECK(q_rot.scalar_type() == (autocast_on ? torch::kBFloat16 : torch::kFloat32));
    }
  }
}

TEST_CASE("rotate_for_decoding declines what it does not compute") {
  const auto q = torch::randn({2, 4, 8}), k = torch::randn({2, 2, 8});
  const auto cos = torch::randn({2, 1, 8}), sin = torch::randn({2, 1, 8});
  CHECK(cpu::rotates_for_decoding(q, k, cos, sin));
  CHECK_FALSE(cpu::rotates_for_decoding(q, k, cos.to(torch::kBFloat16), sin.to(torch::kBFloat16)));  // bfloat16 tables
  CHECK_FALSE(cpu::rotates_for_decoding(q.to(torch::kFloat64), k.to(torch::kFloat64), cos, sin));
  CHECK_FALSE(cpu::rotates_for_decoding(q.transpose(1, 2), k, cos, sin));  // not unit stride along D
  CHECK_FALSE(cpu::rotates_for_decoding(torch::randn({2, 4, 7}), torch::randn({2, 2, 7}), torch::randn({2, 1, 7}),
                                   torch::randn({2, 1, 7})));  // odd D
  CHECK_FALSE(cpu::rotates_for_decoding(q, k, torch::randn({2, 2, 8}), sin));  // two positions: not a decode step
  CHECK_THROWS(cpu::rotate_for_decoding(q, k, cos, sin, torch::kFloat16));
}
