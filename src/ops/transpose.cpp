// A matrix transposed into memory: the one dispatch point, and its reference (LibTorch's copy); see ops.h.
#include "backend.h"

namespace rayless::ops {

torch::Tensor transposed(const torch::Tensor& x) {
  const BackendTable& backend = backend_for(x.device());
  if (backend.transposed)
    if (auto out = backend.transposed(x); out.defined()) return out;
  return x.t().contiguous();
}

}  // namespace rayless::ops
