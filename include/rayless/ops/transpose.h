// A 2-dimensional tensor of 2-byte elements (bfloat16, half) transposed into a new contiguous one, for
// the weight gradients of the training pass under autocast (linear_grads): oneDNN's bfloat16 product
// reads a transposed operand at about half the speed of a row-major one, and LibTorch's strided copy
// of 2-byte elements runs at a fraction of memory speed, so the transpose is written out here.
#pragma once
#include <torch/types.h>

namespace rayless {

// x.t().contiguous(), bit for bit (a transpose only moves elements), for a 2-dimensional CPU tensor;
// other dtypes and devices go to LibTorch's copy.
torch::Tensor transposed(const torch::Tensor& x);

}  // namespace rayless
