// The CUDA backend's table (backend.h): the entries that run a kernel of rayless's own on a CUDA
// device (cuda_backend.h); every other op runs its reference, LibTorch's CUDA operators. A CUDA kernel
// is its source here, one line below and its entry in the plan (kernel_plan.h) with its switch.
// Compiled in every build: the kernels so far are LibTorch compositions and need no CUDA header.
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"

namespace rayless::ops {

const BackendTable& cuda_table() {
  static const BackendTable table = [] {
    BackendTable t;
    t.name = "cuda";
    t.padded_attention = cuda::folded_gqa_attention;
    t.rms_norm = cuda::fused_rms_norm;
    t.decode_rotary = cuda::joint_rotary;
    return t;
  }();
  return table;
}

}  // namespace rayless::ops
