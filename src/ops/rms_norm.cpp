// RMSNorm: the one dispatch point, and its reference (transformers' formula in LibTorch's operators);
// see ops.h.
#include "backend.h"
#include "reference.h"

namespace rayless::ops {

namespace reference {

torch::Tensor rms_normalised(const torch::Tensor& h, double eps, torch::Tensor* inverse_rms) {
  const auto r = torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (inverse_rms) *inverse_rms = r;
  return h * r;
}

}  // namespace reference

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const BackendTable& backend = backend_for(x.device());
  // a decode step's norm first, then training's one-pass backward
  if (backend.decode_rms_norm)
    if (auto out = backend.decode_rms_norm(x, weight, eps); out.defined()) return out;
  if (backend.rms_norm)
    if (auto out = backend.rms_norm(x, weight, eps); out.defined()) return out;
  const auto input_dtype = x.scalar_type();
  return weight * reference::rms_normalised(x.to(torch::kFloat32), eps, nullptr).to(input_dtype);
}

}  // namespace rayless::ops
