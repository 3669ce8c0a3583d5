// The CPU backend's implementations of the ops (ops.h), the entries of its table (cpu_table.cpp). Each
// checks that its kernel is on (kernel_plan.h) and applies to the operands, and returns an undefined
// result (or false) otherwise: the op then runs its reference. The x86 loops they call sit in
// x86/<instruction set>/. Private to src/ops (and the kernels' tests).
#pragma once
#include <torch/types.h>

#include <utility>
#include <vector>

#include "rayless/ops/ops.h"

namespace rayless::ops::cpu {

// autocast_linear.cpp
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// transpose.cpp
torch::Tensor transposed(const torch::Tensor& x);
// generation_weights.cpp
bool onednn_linear_available();    // LibTorch has oneDNN and its packed linear
bool onednn_bfloat16_supported();  // oneDNN has bfloat16 kernels on this CPU
bool pack_generation_weight(const std::vector<torch::Tensor>& parts, torch::ScalarType compute_dtype, bool widened,
                            PackedWeight* out);
torch::Tensor packed_linear(const PackedWeight& packed, const torch::Tensor& x, int64_t outputs,
                            const torch::Tensor& bias);
// attention.cpp
torch::Tensor scaled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale);
torch::Tensor scaled_attention_buckets(const torch::Tensor& queries, const torch::Tensor& k, const torch::Tensor& v,
                                       const std::vector<AttentionBucket>& buckets, double scale);
bool attends_in_buckets(int64_t positions_per_row);
// a decode step's float32 attention (x86/avx2/decode_attention.cpp): [B, 1, H * D], or undefined
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale);
// rms_norm.cpp
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor decode_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
// rotary.cpp, decode_rotary.cpp
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// Whether rotate_for_decoding takes these operands: a CPU decode step (q [B, H, D], k [B, H_kv, D],
// bfloat16 or float32, unit stride along D, even D) with float32 tables cos/sin [B, 1, D].
bool rotates_for_decoding(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                          const torch::Tensor& sin);
// q_out [B, H, 1, D] and k_out [B, H_kv, 1, D] in `out_dtype` (bfloat16 or float32):
// out = round(fl(fl(x * cos) + fl(rotate_half(x) * sin))). Throws where rotates_for_decoding is false.
std::pair<torch::Tensor, torch::Tensor> rotate_for_decoding(const torch::Tensor& q, const torch::Tensor& k,
                                                            const torch::Tensor& cos, const torch::Tensor& sin,
                                                            torch::ScalarType out_dtype);
// the table's entry (rotary.cpp): rotate_for_decoding into the dtype the attention computes in, where the
// kernel is on and rotates_for_decoding
std::pair<torch::Tensor, torch::Tensor> decode_rotary(const torch::Tensor& q, const torch::Tensor& k,
                                                      const torch::Tensor& cos, const torch::Tensor& sin);
// silu_times.cpp
torch::Tensor silu_times_down(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& weight);
bool silu_times_backward(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad,
                         SiluTimesGrads* out);
torch::Tensor decode_silu_times(const torch::Tensor& gate_up);
// adamw_update.cpp, sum_of_squares.cpp
bool adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWHyper& hyper);
bool sum_of_squares(const torch::Tensor& t, double* sum);

}  // namespace rayless::ops::cpu
