// The elementwise half of the MLP's backward under autocast (SiluTimesDown, model.cpp) in one pass over
// bfloat16 rows: autograd's arithmetic made five passes (silu twice, three products, silu_backward),
// each reading and writing intermediate-sized tensors, about 6 ms per layer of a 1,500-token pass.
#pragma once
#include <torch/types.h>

namespace rayless {

struct SiluTimesGrads {
  torch::Tensor product;    // silu(gate) * up, recomputed (the down projection's input)
  torch::Tensor grad_gate;  // silu_backward(grad * up, gate)
  torch::Tensor grad_up;    // grad * silu(gate)
};

// For contiguous bfloat16 CPU tensors gate, up and grad (the product's gradient) of one shape: each
// result rounded to bfloat16 where autograd's ops round (silu(gate), the products, silu_backward), each
// in float32 as LibTorch computes it, with an exp of our own (its series' remainder under one float32
// step), so an element may land on the neighbouring bfloat16 value of autograd's (checked in
// tests/model/test_silu_times_backward.cpp). Other dtypes or devices: autograd's ops.
SiluTimesGrads silu_times_backward(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad);

}  // namespace rayless
