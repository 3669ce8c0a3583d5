// Pieces of the ops' reference implementations that a backend's own implementation repeats exactly (its
// forward is the reference's, its backward its own). Private to src/ops.
#pragma once
#include <torch/types.h>

#include <utility>

#include "rayless/ops/ops.h"

namespace rayless::ops::reference {

// h * rsqrt(mean(h^2, -1) + eps), and the inverse RMS into *inverse_rms when given (rms_norm.cpp)
torch::Tensor rms_normalised(const torch::Tensor& h, double eps, torch::Tensor* inverse_rms);
// x * cos + rotate_half(x) * sin in LibTorch's operators (rotary.cpp)
torch::Tensor rotated(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// A bucket's keys and values: the first `keys` of its rows (a bucket of all rows takes them in place);
// and its queries [count, H, length, D], a view of the flat layout at `offset` (attention.cpp)
std::pair<torch::Tensor, torch::Tensor> bucket_keys(const torch::Tensor& k, const torch::Tensor& v, const AttentionBucket& b);
torch::Tensor bucket_view(const torch::Tensor& flat, int64_t offset, const AttentionBucket& b);

}  // namespace rayless::ops::reference
