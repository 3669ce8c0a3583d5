// scaled_attention (ops.h): LibTorch's scaled_dot_product_attention forward bit for bit,
// and in a bfloat16 pass with gradients a backward in float32, checked against float64 attention and
// against autograd's own (reduced-precision) backward.
#include <catch2/catch.hpp>

#include "model/helpers.h"
#include "model/live_cpu_bytes.h"

#include <ATen/ops/scaled_dot_product_attention.h>

#include "rayless/ops/ops.h"
#include "rayless/ops/autocast_scope.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

struct Operands {
  torch::Tensor q, k, v, allowed;
};

// queries [B, H, L, D] seeing `past` earlier keys and themselves causally, kv heads shared by groups of
// query heads; row 1's first 2 key columns are padding (masked for every query but their own)
Operands operands(int64_t B, int64_t H, int64_t KV, int64_t L, int64_t past, int64_t D, torch::Dtype dtype) {
  torch::manual_seed(11);
  const int64_t S = past + L;
  Operands o;
  o.q = torch::randn({B, L, H, D}).to(dtype).transpose(1, 2);  // the model's layout: heads transposed in
  o.k = torch::randn({B, KV, S, D}).to(dtype);
  o.v = torch::randn({B, KV, S, D}).to(dtype);
  auto allowed = torch::ones({L, S}, torch::kBool).tril(past).expand({B, 1, L, S}).clone();
  allowed[1].narrow(-1, 0, 2).fill_(false);
  allowed[1][0].narrow(-1, past, L).diagonal().fill_(true);  // every query sees itself (attention_masks' rule)
  o.allowed = allowed;
  return o;
}

struct Grads {
  torch::Tensor out, q, k, v;
};

// the output and the gradients of sum(out * weights) with respect to q, k and v (as leaves)
Grads run(const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>& attend,
          const Operands& o, const torch::Tensor& weights) {
  auto q = o.q.detach().requires_grad_(), k = o.k.detach().requires_grad_(), v = o.v.detach().requires_grad_();
  const auto out = attend(q, k, v);
  (out.to(torch::kFloat64) * weights).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

// attention in float64 on the same operands: softmax(q k^T scale, masked) v, kv heads repeated
Grads exact(const Operands& o, const torch::Tensor& weights, double scale) {
  const int64_t group = o.q.size(1) / o.k.size(1);
  return run(
      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        const auto kk = k.to(torch::kFloat64).repeat_interleave(group, 1), vv = v.to(torch::kFloat64).repeat_interleave(group, 1);
        const auto scores = torch::matmul(q.to(torch::kFloat64), kk.transpose(-1, -2)) * scale;
        return torch::matmul(torch::softmax(scores.masked_fill(o.allowed.logical_not(), -INFINITY), -1), vv);
      },
      o, weights);
}

}  // namespace

TEST_CASE("scaled_attention: bfloat16 with gradients gives the forward's bits and float32 backward's gradients") {
  const double scale = 0.125;
  for (const auto& shape : std::vector<std::array<int64_t, 6>>{{3, 4, 2, 40, 9, 64}, {2, 10, 2, 96, 30, 64}, {4, 4, 4, 17, 0, 32}}) {
    const auto [B, H, KV, L, past, D] = shape;
    INFO("B " << B << " H " << H << " KV " << KV << " L " << L << " past " << past << " D " << D);
    const Operands o = operands(B, H, KV, L, past, D, torch::kBFloat16);
    const auto weights = torch::randn({B, H, L, D}, torch::kFloat64);
    const bool gqa = KV != H;
    const Grads ours = run(
        [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          REQUIRE(attention_backward_in_float32(q, k, v));
          return scaled_attention(q, k, v, o.allowed, scale, gqa);
        },
        o, weights);
    const Grads autograds = run(
        [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          return at::scaled_dot_product_attention(q, k, v, o.allowed, 0.0, false, scale, gqa);
        },
        o, weights);
    const Grads reference = exact(o, weights, scale);

    // the forward is LibTorch's call, bit for bit
    CHECK(torch::equal(ours.out, autograds.out));
    // gradients in the operands' dtype, about one bfloat16 rounding from the exact ones (measured
    // 0.0025-0.0030), and nearer than autograd's bfloat16 backward (0.0029-0.0055)
    for (const auto& [name, mine, theirs, truth] :
         std::vector<std::tuple<std::string, torch::Tensor, torch::Tensor, torch::Tensor>>{
             {"q", ours.q, autograds.q, reference.q}, {"k", ours.k, autograds.k, reference.k}, {"v", ours.v, autograds.v, reference.v}}) {
      const double our_error = test::relative_l2_error(mine, truth), their_error = test::relative_l2_error(theirs, truth);
      INFO("d" << name << ": relative error " << our_error << ", autograd's bfloat16 backward " << their_error);
      CHECK(mine.scalar_type() == torch::kBFloat16);
      CHECK(our_error <= 3.5e-3);
      CHECK(our_error < their_error);
    }
  }
}

TEST_CASE("scaled_attention: float32 operands under autocast are cast as autocast casts them") {
  const Operands o = operands(2, 4, 2, 24, 5, 64, torch::kFloat32);
  const auto weights = torch::randn({2, 4, 24, 64}, torch::kFloat64);
  const AutocastScope autocast(true, torch::kCPU);
  const Grads ours = run(
      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        REQUIRE(attention_backward_in_float32(q, k, v));
        return scaled_attention(q, k, v, o.allowed, 0.125, true);
      },
      o, weights);
  const Grads autograds = run(
      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return at::scaled_dot_product_attention(q, k, v, o.allowed, 0.0, false, 0.125, true);
      },
      o, weights);
  CHECK(ours.out.scalar_type() == torch::kBFloat16);
  CHECK(torch::equal(ours.out, autograds.out));
  CHECK(ours.q.scalar_type() == torch::kFloat32);  // the cast's gradient is widened back, as autocast's
}

// In float32 with gradients: LibTorch's values and gradients bit for bit, from a node that keeps the
// caller's boolean mask where LibTorch's keeps a float copy of it per call (per layer in the model).
TEST_CASE("scaled_attention: float32 with gradients is LibTorch's call bit for bit, without a float copy of the mask") {
  const Operands o = operands(2, 4, 2, 24, 5, 64, torch::kFloat32);
  const auto weights = torch::randn({2, 4, 24, 64}, torch::kFloat64);
  const auto ours = run([&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    CHECK(attention_backward_in_float32(q, k, v));
    return scaled_attention(q, k, v, o.allowed, 0.125, true);
  }, o, weights);
  const auto autograds = run([&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return at::scaled_dot_product_attention(q, k, v, o.allowed, 0.0, false, 0.125, true);
  }, o, weights);
  for (const auto& [a, b] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
           {ours.out, autograds.out}, {ours.q, autograds.q}, {ours.k, autograds.k}, {ours.v, autograds.v}})
    CHECK(torch::equal(a, b));

  // what the forward leaves alive for backward beyond its operands and the mask: the output and the
  // log-sum-exp per query and head, and no [L, S] float mask
  const Operands big = operands(2, 4, 2, 512, 0, 64, torch::kFloat32);
  const auto held_after_forward = [&](bool ours_) {
    auto q = big.q.detach().requires_grad_(), k = big.k.detach().requires_grad_(), v = big.v.detach().requires_grad_();
    const test::LiveCpuBytes counted;
    const auto out = ours_ ? scaled_attention(q, k, v, big.allowed, 0.125, true)
                           : at::scaled_dot_product_attention(q, k, v, big.allowed, 0.0, false, 0.125, true);
    return counted.live();
  };
  const int64_t output_bytes = 2 * 512 * 4 * 64 * 4, logsumexp_bytes = 2 * 512 * 4 * 4, mask_as_float = 2 * 512 * 512 * 4;
  const int64_t theirs = held_after_forward(false), mine = held_after_forward(true);
  INFO("held after forward: " << mine << " bytes, LibTorch's call " << theirs);
  CHECK(mine <= output_bytes + logsumexp_bytes + 4096);
  CHECK(theirs >= output_bytes + logsumexp_bytes + mask_as_float);  // what this guards against
}

TEST_CASE("scaled_attention: without gradients it is LibTorch's call unchanged") {
  const Operands low = operands(2, 4, 2, 24, 5, 64, torch::kBFloat16);
  torch::NoGradGuard no_grad;
  CHECK_FALSE(attention_backward_in_float32(low.q, low.k, low.v));
  CHECK(torch::equal(scaled_attention(low.q, low.k, low.v, low.allowed, 0.125, true),
                     at::scaled_dot_product_attention(low.q, low.k, low.v, low.allowed, 0.0, false, 0.125, true)));
}

// The packed pass's buckets (ops.h, bucketed_attention) as one node, against scaled_attention called bucket by
// bucket (what bucketed_attention did before) and against the same buckets in float64.
TEST_CASE("scaled_attention_buckets: scaled_attention bucket by bucket, bit for bit, values and gradients") {
  const int64_t B = 5, H = 4, KV = 2, D = 64, past = 6, T = 12;
  torch::manual_seed(5);
  const auto allowed = torch::ones({T, past + T}, torch::kBool).tril(past).expand({B, 1, T, past + T}).clone();
  std::vector<AttentionBucket> plan;
  for (const auto& [rows, length] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{1, 3}, 5}, {{0, 2, 4}, 12}}) {
    AttentionBucket b;
    b.count = static_cast<int64_t>(rows.size());
    b.length = length;
    b.keys = past + length;
    b.rows = torch::tensor(rows, torch::kLong);
    b.allowed = allowed.narrow(2, 0, length).narrow(3, 0, b.keys).index_select(0, b.rows);
    plan.push_back(b);
  }
  const int64_t N = 2 * 5 + 3 * 12;
  const auto q0 = torch::randn({N, H, D}).to(torch::kBFloat16), k0 = torch::randn({B, KV, past + T, D}).to(torch::kBFloat16),
             v0 = torch::randn({B, KV, past + T, D}).to(torch::kBFloat16);
  const auto weights = torch::randn({N, H * D}, torch::kFloat64);
  // out, dq, dk, dv of sum(out * weights), by `attend` on leaves of the operands in `dtype`
  const auto gradients = [&](const auto& attend, torch::Dtype dtype) {
    const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(); };
    auto q = leaf(q0), k = leaf(k0), v = leaf(v0);
    const auto out = attend(q, k, v);
    (out.to(torch::kFloat64) * weights).sum().backward();
    return std::vector<torch::Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
  };
  const auto one_by_one = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    std::vector<torch::Tensor> outputs;
    int64_t offset = 0;
    for (const AttentionBucket& b : plan) {
      const auto qb = q.narrow(0, offset, b.count * b.length).view({b.count, b.length, H, D}).transpose(1, 2);
      const auto kb = k.narrow(2, 0, b.keys).index_select(0, b.rows), vb = v.narrow(2, 0, b.keys).index_select(0, b.rows);
      outputs.push_back(scaled_attention(qb, kb, vb, b.allowed, 0.125, true).transpose(1, 2).reshape({b.count * b.length, H * D}));
      offset += b.count * b.length;
    }
    return torch::cat(outputs, 0);
  };
  const auto ours = gradients(
      [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        REQUIRE(attention_backward_in_float32(q, k, v));
        return scaled_attention_buckets(q, k, v, plan, 0.125, true);
      },
      torch::kBFloat16);
  const auto separate = gradients(one_by_one, torch::kBFloat16);
  const auto exact = gradients(one_by_one, torch::kFloat64);

  // a row belongs to one bucket, so each gradient comes from one flash backward in float32: the node
  // gives the bucket-by-bucket values bit for bit, without a full-size zero gradient per bucket
  for (int i = 0; i < 4; ++i) {
    INFO("tensor " << i << " of out, dq, dk, dv: relative error against float64 " << test::relative_l2_error(ours[i], exact[i]));
    CHECK(torch::equal(ours[i], separate[i]));
    CHECK(test::relative_l2_error(ours[i], exact[i]) <= 3.5e-3);
  }
  // the keys no bucket reaches (past the longest query of rows 1 and 3) get no gradient
  CHECK(ours[2].index_select(0, torch::tensor({1, 3}, torch::kLong)).narrow(2, past + 5, T - 5).abs().max().item<double>() == 0);
}
