// The rotary embedding, training's and a decode step's: the one dispatch point of each, and their
// reference (transformers' apply_rotary_pos_emb in LibTorch's operators); see ops.h.
#include "backend.h"
#include "reference.h"

namespace rayless::ops {

namespace {
torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
}  // namespace

torch::Tensor reference::rotated(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const BackendTable& backend = backend_for(x.device());
  if (backend.apply_rotary)
    if (auto out = backend.apply_rotary(x, cos, sin); out.defined()) return out;
  return reference::rotated(x, cos, sin);
}

std::pair<torch::Tensor, torch::Tensor> decode_rotary(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& cos, const torch::Tensor& sin) {
  const BackendTable& backend = backend_for(q.device());
  if (backend.decode_rotary)
    if (auto out = backend.decode_rotary(q, k, cos, sin); out.first.defined()) return out;
  // the padded layout [B, heads, 1, D] of one position per row, the tables [B, 1, 1, D]
  const auto padded = [](const torch::Tensor& x) { return x.view({x.size(0), 1, x.size(1), x.size(2)}).transpose(1, 2); };
  const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
  return {apply_rotary(padded(q), c, s), apply_rotary(padded(k), c, s)};
}

}  // namespace rayless::ops
