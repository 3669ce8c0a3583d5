// The CUDA backend's kernels (cuda_table.cpp lists them). Private to src/ops. They are compositions of
// LibTorch's operators that steer it to its fused CUDA kernels, so they compile in every build and
// their tests run them on the CPU against the reference.
#pragma once
#include <torch/types.h>

#include <utility>

namespace rayless::ops::cuda {

// Attention where the query heads outnumber the key heads (grouped-query attention,
// folded_gqa_attention.cpp), with or without gradients: q [B, H, T, D], k and v [B, H_kv, S, D], allowed
// [B or 1, 1, T or 1, S] (or undefined). Returns [B, T, H * D], or undefined where it does not apply (the
// kernel off, as many key heads as query heads).
torch::Tensor folded_gqa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& allowed, double scale);

// RMSNorm as LibTorch's _fused_rms_norm (fused_rms_norm.cpp), with or without gradients: x [..., D] and
// weight [D] of one dtype, float32 or narrower. Returns x's shape and dtype, or undefined where it does
// not apply (the kernel off, mixed dtypes, float64).
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// A decode step's rotary embedding (joint_rotary.cpp): q [B, H, D] and k [B, H_kv, D] with the tables
// cos, sin [B, 1, D], without gradients -> q [B, H, 1, D] and k [B, H_kv, 1, D] (ops.h, decode_rotary),
// in the dtype the reference's operators give. Undefined where it does not apply (the kernel off,
// gradients, other shapes).
std::pair<torch::Tensor, torch::Tensor> joint_rotary(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace rayless::ops::cuda
