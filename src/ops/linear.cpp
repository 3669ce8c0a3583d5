// The decoder's projections: the one dispatch point, and the gradients of a linear layer that the
// backward passes of the CPU's nodes share; see ops.h.
#include "backend.h"

namespace rayless::ops {

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const BackendTable& backend = backend_for(weight.device());
  // under autocast, training passes hold the float32 weight for backward, not a low-precision copy
  if (backend.linear)
    if (auto y = backend.linear(x, weight, bias); y.defined()) return y;
  return linear_as_autocast(x, weight, bias);
}

LinearGrads linear_grads(const torch::Tensor& grad_output, const torch::Tensor& input, const torch::Tensor& weight) {
  const torch::Tensor grad_2d = grad_output.reshape({-1, grad_output.size(-1)});
  // mm(input_2d, weight.t()): mat1's grad is grad.mm(mat2.t())
  return {bfloat16_aware_mm(grad_2d, weight).reshape(input.sizes()), linear_weight_grad(grad_output, input)};
}

torch::Tensor linear_weight_grad(const torch::Tensor& grad_output, const torch::Tensor& input) {
  const torch::Tensor input_2d = input.reshape({-1, input.size(-1)});  // a view: input is contiguous
  const torch::Tensor grad_2d = grad_output.reshape({-1, grad_output.size(-1)});
  // mat2 (the weight, transposed) is column-major, so its grad is grad.t().mm(mat1).t(), transposed
  // back by t()'s grad. In 2-byte dtypes the gradient is transposed into memory first (transposed),
  // as oneDNN multiplies a row-major operand faster (1.3-1.9x at the training pass's shapes).
  if (widens_bfloat16_product(grad_2d, input_2d)) return bfloat16_aware_mm(grad_2d.t(), input_2d);
  const bool two_bytes = grad_2d.element_size() == 2 && grad_2d.device().is_cpu();
  return (two_bytes ? transposed(grad_2d) : grad_2d.t()).mm(input_2d);
}

}  // namespace rayless::ops
