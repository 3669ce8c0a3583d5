// Attention in its layouts: the one dispatch point of each, and their reference (LibTorch's
// scaled_dot_product_attention); see ops.h.
#include "backend.h"
#include "reference.h"

#include <ATen/ops/scaled_dot_product_attention.h>

namespace rayless::ops {

std::pair<torch::Tensor, torch::Tensor> reference::bucket_keys(const torch::Tensor& k, const torch::Tensor& v,
                                                               const AttentionBucket& b) {
  auto kb = k.narrow(2, 0, b.keys), vb = v.narrow(2, 0, b.keys);
  if (b.rows.defined()) {
    kb = kb.index_select(0, b.rows);
    vb = vb.index_select(0, b.rows);
  }
  return {kb, vb};
}

torch::Tensor reference::bucket_view(const torch::Tensor& flat, int64_t offset, const AttentionBucket& b) {
  return flat.narrow(0, offset, b.count * b.length).view({b.count, b.length, flat.size(1), flat.size(2)}).transpose(1, 2);
}

torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa) {
  const BackendTable& backend = backend_for(q.device());
  if (backend.scaled_attention)
    if (auto out = backend.scaled_attention(q, k, v, allowed, scale); out.defined()) return out;
  return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, false, scale, enable_gqa);
}

torch::Tensor scaled_attention_buckets(const torch::Tensor& queries, const torch::Tensor& k, const torch::Tensor& v,
                                       const std::vector<AttentionBucket>& buckets, double scale, bool enable_gqa) {
  const BackendTable& backend = backend_for(queries.device());
  if (backend.scaled_attention_buckets)
    if (auto out = backend.scaled_attention_buckets(queries, k, v, buckets, scale); out.defined()) return out;
  // bucket by bucket through autograd: the queries split (split's backward is one cat, where narrowing
  // per bucket would build a full-size gradient for each)
  std::vector<int64_t> sizes;
  for (const AttentionBucket& b : buckets) sizes.push_back(b.count * b.length);
  const auto split = queries.split_with_sizes(sizes);
  std::vector<torch::Tensor> outputs;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const AttentionBucket& b = buckets[i];
    const auto [kb, vb] = reference::bucket_keys(k, v, b);
    const auto out = scaled_attention(reference::bucket_view(split[i], 0, b), kb, vb, b.allowed, scale, enable_gqa);
    outputs.push_back(out.transpose(1, 2).reshape({b.count * b.length, queries.size(1) * queries.size(2)}));
  }
  return torch::cat(outputs, 0);
}

torch::Tensor padded_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale, bool enable_gqa) {
  const BackendTable& backend = backend_for(q.device());
  // the backend's own: on the CPU a decode step in one pass, on CUDA grouped-query heads folded into
  // one attention per key head; both without a repeated copy of the keys and values
  if (backend.padded_attention)
    if (auto out = backend.padded_attention(q, k, v, allowed, scale); out.defined()) return out;
  return scaled_attention(q, k, v, allowed, scale, enable_gqa)
      .transpose(1, 2)
      .reshape({q.size(0), q.size(2), q.size(1) * q.size(3)});
}

}  // namespace rayless::ops
