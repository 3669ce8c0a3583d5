// silu(gate) * up, in training and in generation: the one dispatch point of each, and their reference
// (LibTorch's silu and mul, autograd's backward); see ops.h.
#include "backend.h"

#include <ATen/ops/silu_backward.h>
#include <torch/csrc/autograd/custom_function.h>

namespace rayless::ops {

namespace {
// silu(gate) * up, keeping only gate and up for backward (autograd's two ops would also keep
// silu(gate), an intermediate-sized tensor per token and layer: the largest activation of training).
// The backward is autograd's own arithmetic (mul's and silu_backward), so gradients are bit-for-bit
// the same.
struct SiluTimes : public torch::autograd::Function<SiluTimes> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return torch::silu(gate) * up;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto& grad = grad_outputs[0];
    return {at::silu_backward(grad * up, gate), grad * torch::silu(gate)};
  }
};
}  // namespace

torch::Tensor silu_times(const torch::Tensor& gate, const torch::Tensor& up) {
  if (!torch::GradMode::is_enabled()) return torch::silu(gate) * up;
  return SiluTimes::apply(gate, up);
}

torch::Tensor silu_times_down(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& weight) {
  const BackendTable& backend = backend_for(weight.device());
  return backend.silu_times_down ? backend.silu_times_down(gate, up, weight) : torch::Tensor();
}

SiluTimesGrads silu_times_backward(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad) {
  const BackendTable& backend = backend_for(gate.device());
  if (SiluTimesGrads out; backend.silu_times_backward && backend.silu_times_backward(gate, up, grad, &out)) return out;
  const torch::Tensor silu = torch::silu(gate);
  return {silu * up, at::silu_backward(grad * up, gate), grad * silu};
}

torch::Tensor decode_silu_times(const torch::Tensor& gate_up) {
  const BackendTable& backend = backend_for(gate_up.device());
  if (backend.decode_silu_times)
    if (auto product = backend.decode_silu_times(gate_up); product.defined()) return product;
  const int64_t intermediate = gate_up.size(-1) / 2;
  return torch::silu(gate_up.narrow(-1, 0, intermediate)) * gate_up.narrow(-1, intermediate, intermediate);
}

}  // namespace rayless::ops
