// Attention on the CPU: the flash kernel with gradients as one node that keeps the boolean mask (and
// computes the backward in float32 for bfloat16 training; attention_float32_backward), one call or a packed pass's buckets as one node; the packed passes'
// length buckets (length_buckets); a decode step's float32 attention in one pass (avx2_decode_attention).
// See ops.h.
#include "ops/cpu/cpu_backend.h"

#include <ATen/Context.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <torch/autograd.h>

#include <limits>

#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "ops/reference.h"
#include "rayless/ops/autocast_scope.h"

namespace rayless::ops {

namespace {

// the dtypes LibTorch's CPU flash kernel computes (float64 goes to its math path)
bool flash_dtype(at::ScalarType dtype) { return dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf; }

// The boolean mask as the additive one the flash kernel takes (0 where allowed, -inf elsewhere), in the
// query's dtype: what at::scaled_dot_product_attention builds from a boolean mask before calling it.
torch::Tensor additive(const torch::Tensor& allowed, at::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

// The CPU flash kernel's forward as at::scaled_dot_product_attention calls it on a boolean mask.
std::tuple<torch::Tensor, torch::Tensor> flash_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                       const torch::Tensor& allowed, double scale) {
  return at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false, additive(allowed, q.scalar_type()), scale);
}

// Its backward on float32 copies of the forward's operands and results: float32 dq, dk, dv.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> float32_flash_backward(
    const torch::Tensor& grad, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& out, const torch::Tensor& logsumexp, const torch::Tensor& allowed, double scale) {
  const auto wide = [](const torch::Tensor& t) { return t.to(at::kFloat); };
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(wide(grad), wide(q), wide(k), wide(v), wide(out),
                                                                  logsumexp, 0.0, false, additive(allowed, at::kFloat), scale);
}

// One call's forward and float32 backward, the gradients rounded to the operands' dtype once. It saves
// the caller's boolean mask, which every layer shares, and builds the additive one again in backward:
// LibTorch's node saves its additive mask, a float copy of [length, keys] per layer and call (at 16k
// tokens, 1 GiB per layer in float32).
struct FlashAttentionFloat32Backward : public torch::autograd::Function<FlashAttentionFloat32Backward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& allowed, double scale) {
    auto [out, logsumexp] = flash_forward(q, k, v, allowed, scale);
    ctx->save_for_backward({q, k, v, out, logsumexp, allowed});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto [dq, dk, dv] = float32_flash_backward(grad_outputs[0], saved[0], saved[1], saved[2], saved[3], saved[4], saved[5],
                                               ctx->saved_data["scale"].toDouble());
    return {dq.to(saved[0].scalar_type()), dk.to(saved[1].scalar_type()), dv.to(saved[2].scalar_type()),
            torch::Tensor(), torch::Tensor()};
  }
};

using reference::bucket_keys;
using reference::bucket_view;

struct BucketedFlashAttention : public torch::autograd::Function<BucketedFlashAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& queries, const torch::Tensor& k,
                               const torch::Tensor& v, const std::vector<AttentionBucket>& buckets, double scale) {
    const int64_t H = queries.size(1), D = queries.size(2);
    std::vector<torch::Tensor> outputs, saved{queries, k, v};
    std::vector<int64_t> shape;  // count, length, keys: three per bucket
    int64_t offset = 0;
    for (const AttentionBucket& b : buckets) {
      const auto [kb, vb] = bucket_keys(k, v, b);
      auto [out, logsumexp] = flash_forward(bucket_view(queries, offset, b), kb, vb, b.allowed, scale);
      outputs.push_back(out.transpose(1, 2).reshape({b.count * b.length, H * D}));
      saved.insert(saved.end(), {out, logsumexp, b.allowed, b.rows.defined() ? b.rows : torch::Tensor()});
      shape.insert(shape.end(), {b.count, b.length, b.keys});
      offset += b.count * b.length;
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["shape"] = shape;
    ctx->saved_data["scale"] = scale;
    return torch::cat(outputs, 0);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &queries = saved[0], &k = saved[1], &v = saved[2];
    const auto shape = ctx->saved_data["shape"].toIntVector();
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t H = queries.size(1), D = queries.size(2);
    const auto grad = grad_outputs[0].view({-1, H, D});
    auto dq = torch::empty(queries.sizes(), queries.options().dtype(at::kFloat));
    auto dk = torch::zeros(k.sizes(), k.options().dtype(at::kFloat));
    auto dv = torch::zeros(v.sizes(), v.options().dtype(at::kFloat));
    int64_t offset = 0;
    for (size_t i = 0; i * 3 < shape.size(); ++i) {
      AttentionBucket b{shape[3 * i], shape[3 * i + 1], shape[3 * i + 2], saved[3 + 4 * i + 3], saved[3 + 4 * i + 2]};
      const torch::Tensor &out = saved[3 + 4 * i], &logsumexp = saved[3 + 4 * i + 1];
      const auto [kb, vb] = bucket_keys(k, v, b);
      auto [dqb, dkb, dvb] = float32_flash_backward(bucket_view(grad, offset, b), bucket_view(queries, offset, b), kb, vb,
                                                    out, logsumexp, b.allowed, scale);
      bucket_view(dq, offset, b).copy_(dqb);
      auto dk_keys = dk.narrow(2, 0, b.keys), dv_keys = dv.narrow(2, 0, b.keys);
      if (b.rows.defined()) {
        dk_keys.index_add_(0, b.rows, dkb);
        dv_keys.index_add_(0, b.rows, dvb);
      } else {
        dk_keys.add_(dkb);
        dv_keys.add_(dvb);
      }
      offset += b.count * b.length;
    }
    return {dq.to(queries.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type()), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool attention_backward_in_float32(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto dtype = autocast_compute_dtype(q.device().type(), q.scalar_type());
  return kernel_plan().on(Kernel::attention_float32_backward) && q.device().is_cpu() && flash_dtype(dtype) &&
         torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()) &&
         at::globalContext().userEnabledFlashSDP();
}

namespace cpu {

torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale) {
  if (q.dim() != 4 || !attention_backward_in_float32(q, k, v)) return {};
  // autocast's casts of the operands, as it would make them for at::scaled_dot_product_attention
  const auto dtype = autocast_compute_dtype(q.device().type(), q.scalar_type());
  return FlashAttentionFloat32Backward::apply(q.to(dtype), k.to(dtype), v.to(dtype), allowed, scale);
}

torch::Tensor scaled_attention_buckets(const torch::Tensor& queries, const torch::Tensor& k, const torch::Tensor& v,
                                       const std::vector<AttentionBucket>& buckets, double scale) {
  if (!attention_backward_in_float32(queries, k, v)) return {};
  const auto dtype = autocast_compute_dtype(queries.device().type(), queries.scalar_type());
  return BucketedFlashAttention::apply(queries.to(dtype), k.to(dtype), v.to(dtype), buckets, scale);
}

// a decode step has nothing to bucket
bool attends_in_buckets(int64_t positions_per_row) {
  return positions_per_row > 1 && kernel_plan().on(Kernel::length_buckets);
}

torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale) {
  if (!kernel_plan().on(Kernel::avx2_decode_attention)) return {};
  return avx2::decode_attention(q, k, v, allowed, scale);
}

}  // namespace cpu

}  // namespace rayless::ops
