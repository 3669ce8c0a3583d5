// The CUDA backend's table (backend.h): no kernel of rayless's own yet, so every op runs its reference,
// LibTorch's CUDA operators. A CUDA kernel is its source here and one line below, e.g.
//   t.decode_attention = cuda::decode_attention;
// (and its entry in the plan, kernel_plan.h, with its switch). Compiled in every build: it needs no
// CUDA header until the first kernel.
#include "ops/backend.h"

namespace rayless::ops {

const BackendTable& cuda_table() {
  static const BackendTable table = [] {
    BackendTable t;
    t.name = "cuda";
    return t;
  }();
  return table;
}

}  // namespace rayless::ops
