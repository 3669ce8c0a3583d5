// One AdamW step for one tensor in a single pass over memory. torch::optim::AdamW makes about ten
// passes (one per tensor op), which was ~0.24 s of each optimizer step for the 53M benchmark model;
// a single pass reads param, grad and the two moments once and writes three of them once.
#pragma once
#include <torch/types.h>

#include <cstdint>

namespace rayless {

struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;  // this step's number, counted from 1 (the bias corrections use it)
  // the gradient clip's coefficient (clip_coefficient, optimizer.h), applied in the same pass: the
  // gradient times it, rounded to the gradient's dtype, is what the formulas below call g
  double grad_scale = 1.0;
};

// In place, element by element, the formulas of torch.optim.AdamW's single-tensor path (what TRL runs
// on a CPU), each rounded in the tensors' compute type:
//   p  *= 1 - lr * weight_decay
//   m   = m + (1 - beta1) * (g - m)                  (lerp)
//   v   = v * beta2 + (1 - beta2) * g * g
//   p  += -(lr / (1 - beta1^step)) * (m / (sqrt(v) / sqrt(1 - beta2^step) + eps))
// Every element's result depends only on its own inputs (no fused multiply-add, no reordering), so a
// slice updated alone (ZeRO) comes out bit for bit as the same elements of the whole tensor. All four
// tensors must be contiguous, of one dtype, numel and device (float32, float64 or bfloat16: bfloat16
// computes in float32). Off the CPU it runs adamw_update_tensor_ops.
void adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWHyper& hyper);
// The same formulas as torch.optim.AdamW writes them, one tensor op each (lerp_, addcmul_, addcdiv_):
// any device; the tests' second method.
void adamw_update_tensor_ops(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                             torch::Tensor& exp_avg_sq, const AdamWHyper& hyper);

}  // namespace rayless
