// The model's linear layers in training passes under autocast (train.bf16), holding less for backward
// than autograd's linear under autocast: no low-precision copy of the weight, one cast of an input
// that several projections share.
#pragma once
#include <torch/types.h>

namespace rayless {

// True when torch::linear(x, weight, bias) would run lowered by autocast with a float32 weight that
// trains, on the CPU, in a form autocast_linear reproduces bit for bit (x contiguous, of 2 or 3
// dimensions, float32 or already in the autocast dtype).
bool autocast_linear_applies(const torch::Tensor& x, const torch::Tensor& weight);

// torch::linear(x, weight, bias) as autocast computes it (operands cast to the autocast dtype), with
// the same output and the same input and bias gradients bit for bit; the weight's gradient is
// linear_grads' (below). Two savings:
// - autograd's linear keeps the cast weight until its backward runs, so a whole model's low-precision
//   copy (autocast's cache) is held from the forward to the end of backward; this keeps the float32
//   weight it already has and casts it again in its backward. A weight used twice before backward
//   gets the float32 sum of the two uses' gradients, where autocast sums them in its own dtype first
//   (the trainer's passes use each weight once).
// - projections of the same input in a row (q, k, v; gate, up) share one cast of it, where autocast
//   casts it for each and autograd keeps every cast; the input's gradient is the same float32 sum.
// Call only where autocast_linear_applies.
torch::Tensor autocast_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// The gradients of torch::linear(input, weight) without a bias, for a contiguous input of 2 or 3
// dimensions (addmm or mm on it flattened to 2, row-major), both in the operands' dtype: the input's
// (its shape), bit for bit autograd's; the weight's, autograd's grad.t().mm(input) in float32 and
// float64, and in 2-byte dtypes on the CPU transposed(grad).mm(input) (transpose.h): the same product
// with a row-major operand, which oneDNN computes 1.3-1.9x faster at a training pass's shapes. Its
// float32 sums then run in another order, as near the exact product as autograd's (checked in
// tests/model/test_model.cpp), not bit for bit. For backward passes that keep less than autograd's
// linear would and recompute the rest.
struct LinearGrads {
  torch::Tensor input, weight;
};
LinearGrads linear_grads(const torch::Tensor& grad_output, const torch::Tensor& input, const torch::Tensor& weight);
// The weight's gradient alone, as linear_grads computes it.
torch::Tensor linear_weight_grad(const torch::Tensor& grad_output, const torch::Tensor& input);

// Forgets the remembered input cast (AutocastScope's end does, with autocast's own cache).
void clear_autocast_linear_casts();

}  // namespace rayless
