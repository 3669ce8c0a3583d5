// The AVX-512 kernels: the vector loops inside the CPU's one-pass implementations (cpu_backend.h), 16
// float32 elements at a time. Each is compiled with its own target attribute, so the rest of the build
// needs no AVX-512 flags; the CPU backend calls them only where the plan (kernel_plan.h) found AVX-512F
// and the kernel on, and only with RAYLESS_X86_KERNELS. Private to src/ops.
#pragma once
#include <c10/util/BFloat16.h>

#include <cstdint>

#include "rayless/base/cpu_features.h"
#include "rayless/ops/ops.h"

#ifdef RAYLESS_X86_KERNELS
namespace rayless::ops::avx512 {

// avx512_rms_norm_backward: rms_norm_one_pass_backward's rows (cpu/rms_norm.cpp) for D % 16 == 0, the
// same formulas with the sums in 16 lanes and fused multiply-adds.
void rms_norm_backward_rows(const float* g, const float* x, const float* w, const float* r, int64_t rows, int64_t D,
                            float* dx, float* gw_sum);

// avx512_rotary_forward, avx512_rotary_backward: rotary_one_pass's loops (cpu/rotary.cpp) for
// D % 32 == 0, the same bits as the portable ones (no fused multiply-add in the forward; the backward's
// NaN is c10::BFloat16's, as the portable backward's).
void rotary_forward(const c10::BFloat16* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
                    c10::BFloat16* out);
void rotary_backward(const float* g, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
                     c10::BFloat16* dx);

// avx512_silu_times_backward: silu_times_one_pass_backward's rows (cpu/silu_times.cpp) over the whole
// groups of 16 of `count` elements, with an exponential of its own; returns where the portable loop
// goes on.
int64_t silu_times_backward_rows(const uint16_t* gate, const uint16_t* up, const uint16_t* grad, uint16_t* product,
                                 uint16_t* grad_gate, uint16_t* grad_up, int64_t count);

// avx512_transpose: transpose_tiles' blocks of 32 rows by 16 columns (cpu/transpose.cpp) of an
// in[rows][cols] matrix of 2-byte elements, the first row_blocks x col_blocks of them.
void transpose_blocks(const uint16_t* in, uint16_t* out, int64_t rows, int64_t cols, int64_t row_blocks,
                      int64_t col_blocks);

// avx512_adamw, avx512_sum_of_squares: the float32 loops of adamw_single_pass and
// sum_of_squares_single_pass, the same operations in the same order as the portable loop, each rounded
// (no fused multiply-add), so every element (every partial sum) comes out bit for bit as there. Each
// returns where the portable loop goes on.
int64_t adamw_update_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin,
                           int64_t end, const AdamWHyper& hyper);
int64_t sum_of_squares_float(const float* x, int64_t n, double partial[8]);

}  // namespace rayless::ops::avx512
#endif
