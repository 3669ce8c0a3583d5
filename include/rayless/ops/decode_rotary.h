// The rotary embedding of one decode step's queries and keys in one pass over them.
//
// LibTorch evaluates `x * cos + rotate_half(x) * sin` as six operators per tensor (two halves, a
// negation, a concatenation, two products and a sum), and under bfloat16 autocast each product with
// the float32 tables first copies its bfloat16 operand to float32; the attention then casts q back to
// bfloat16 and the cache casts k. A decode step holds one token per row, so these are a few hundred
// tiny operators per step, each costing its dispatch and allocation more than its arithmetic
// (docs/benchmarks.md, "Levers measured after the three runs"). Here one loop computes each element
// as those operators do, float32 product, float32 product, float32 sum, each rounded (this file is
// compiled without fused multiply-add contraction), and rounds the sum once to the dtype the
// attention and the cache would have cast it to: the same bits as the operators.
#pragma once
#include <torch/types.h>

#include <utility>

namespace rayless {

// Whether rotate_for_decoding takes these operands: a CPU decode step (q [B, H, D], k [B, H_kv, D],
// bfloat16 or float32, unit stride along D, even D) with float32 tables cos/sin [B, 1, D].
bool rotates_for_decoding(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                          const torch::Tensor& sin);

// q_out [B, H, 1, D] and k_out [B, H_kv, 1, D] (the attention's padded layout for one position) in
// `out_dtype` (bfloat16 or float32): out = round(fl(fl(x * cos) + fl(rotate_half(x) * sin))), where
// rotate_half(x) = cat(-x[D/2:], x[:D/2]).
std::pair<torch::Tensor, torch::Tensor> rotate_for_decoding(const torch::Tensor& q, const torch::Tensor& k,
                                                            const torch::Tensor& cos, const torch::Tensor& sin,
                                                            torch::ScalarType out_dtype);

}  // namespace rayless
