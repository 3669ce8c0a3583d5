// joint_rotary (ops/cuda): a decode step's rotary embedding of q and k together, half by half, three
// kernels where the reference ran ten. A composition of LibTorch's operators, so it runs here against
// transformers' formula (the reference it replaces on a GPU); tests/devices/test_cuda_vs_cpu.cpp runs it
// on CUDA.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "rayless/ops/kernel_plan.h"

using namespace rayless;
using namespace rayless::ops;

namespace {
// transformers' apply_rotary_pos_emb on the attention's padded layout [B, heads, 1, D], tables [B, 1, 1, D]
torch::Tensor transformers_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto padded = x.view({x.size(0), 1, x.size(1), x.size(2)}).transpose(1, 2);
  const int64_t half = x.size(2) / 2;
  const auto rotated_half = torch::cat({-padded.narrow(-1, half, half), padded.narrow(-1, 0, half)}, -1);
  return padded * cos.unsqueeze(1) + rotated_half * sin.unsqueeze(1);
}

struct Qk {
  torch::Tensor qkv, q, k;
};
// q and k as generation's fused projection leaves them: neighbouring heads of one [B, H + 2 H_kv, D]
Qk fused_projection(int64_t rows, int64_t heads, int64_t kv_heads, int64_t dim, torch::Dtype dtype) {
  Qk out;
  out.qkv = (2.0 * torch::randn({rows, heads + 2 * kv_heads, dim}, torch::kFloat64)).to(dtype);
  out.q = out.qkv.narrow(1, 0, heads);
  out.k = out.qkv.narrow(1, heads, kv_heads);
  return out;
}
}  // namespace

TEST_CASE("joint_rotary: transformers' rotary embedding of a decode step, q and k together or apart") {
  torch::NoGradGuard no_grad;
  torch::manual_seed(21);
  struct Case {
    torch::Dtype x, table;
  };
  // the model's dtype throughout; bfloat16 projections with float32 tables (autocast): float32 results
  for (const Case c : {Case{torch::kFloat64, torch::kFloat64}, Case{torch::kFloat32, torch::kFloat32},
                       Case{torch::kBFloat16, torch::kBFloat16}, Case{torch::kBFloat16, torch::kFloat32}}) {
    for (const bool together : {true, false}) {
      INFO(c.x << " with " << c.table << " tables, q and k " << (together ? "neighbours" : "apart"));
      const int64_t rows = 16, heads = 14, kv_heads = 2, dim = 64;  // the 0.5B Qwen2.5 shape's heads
      const Qk qk = fused_projection(rows, heads, kv_heads, dim, c.x);
      const auto q = together ? qk.q : qk.q.clone(), k = together ? qk.k : qk.k.clone();
      const auto angles = torch::rand({rows, 1, dim / 2}, torch::kFloat64) * 50.0;
      const auto cos = torch::cat({angles, angles}, -1).cos().to(c.table), sin = torch::cat({angles, angles}, -1).sin().to(c.table);
      const auto [q_out, k_out] = cuda::joint_rotary(q, k, cos, sin);
      REQUIRE(q_out.defined());
      CHECK(q_out.sizes() == torch::IntArrayRef({rows, heads, 1, dim}));
      CHECK(k_out.sizes() == torch::IntArrayRef({rows, kv_heads, 1, dim}));
      // together: both are views of one rotated tensor
      CHECK(q_out.storage().is_alias_of(k_out.storage()) == together);
      CHECK(qk.qkv.storage().is_alias_of(q_out.storage()) == false);  // the projection is left as it was
      for (const auto& [out, in] : {std::pair{q_out, q}, std::pair{k_out, k}}) {
        const auto reference = transformers_rotary(in, cos, sin);
        CHECK(out.scalar_type() == reference.scalar_type());
        if (reference.scalar_type() != torch::kBFloat16) {
          const double tolerance = reference.scalar_type() == torch::kFloat64 ? 1e-14 : 1e-6;
          const double error = ((out - reference).abs() / (1.0 + reference.abs())).max().item<double>();
          INFO("largest difference " << error);
          CHECK(error <= tolerance);
        } else {
          // bfloat16: the sum rounded once, the reference's product rounded first: within one rounding
          // of the exact value (2^-8 relative, and one step of the reference's rounded product)
          const auto exact = transformers_rotary(in.to(torch::kFloat64), cos.to(torch::kFloat64), sin.to(torch::kFloat64));
          const auto error = (out.to(torch::kFloat64) - exact).abs();
          const auto bound = (exact.abs() + (in.to(torch::kFloat64).abs().unsqueeze(2) * 2)) * std::ldexp(1.0, -8);
          CHECK((error <= bound.expand_as(error)).all().item<bool>());
        }
      }
    }
  }
}

TEST_CASE("joint_rotary: declines gradients, other shapes and with its switch off, and is the CUDA backend's, not the CPU's") {
  const Qk qk = fused_projection(2, 4, 2, 8, torch::kFloat32);
  const auto cos = torch::rand({2, 1, 8}), sin = torch::rand({2, 1, 8});
  {
    torch::NoGradGuard no_grad;
    CHECK(cuda::joint_rotary(qk.q, qk.k, cos, sin).first.defined());
    CHECK_FALSE(cuda::joint_rotary(qk.q, qk.k, cos.narrow(2, 0, 4), sin.narrow(2, 0, 4)).first.defined());
    CHECK_FALSE(cuda::joint_rotary(qk.q, qk.k.to(torch::kFloat64), cos, sin).first.defined());
    const KernelOverride off(Kernel::joint_rotary, false);
    CHECK_FALSE(cuda::joint_rotary(qk.q, qk.k, cos, sin).first.defined());
  }
  // with gradients (training's rotary): the reference and its autograd
  const auto q = qk.q.clone().requires_grad_(true);
  CHECK_FALSE(cuda::joint_rotary(q, qk.k, cos, sin).first.defined());
  CHECK(backend_for(torch::Device(torch::kCUDA, 0)).decode_rotary == &cuda::joint_rotary);
  CHECK(backend_for(torch::kCPU).decode_rotary != &cuda::joint_rotary);
}
