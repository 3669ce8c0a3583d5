// silu(gate) * up on the CPU: training's recomputing node with the down projection (silu_times_down),
// its backward's element-wise half in one pass (silu_times_one_pass_backward, 16 at a time on AVX-512:
// avx512_silu_times_backward), and generation's float32 one pass (avx2_decode_silu_times); see ops.h.
#include "ops/cpu/cpu_backend.h"

#include <ATen/ops/silu_backward.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdint>

#include "ops/cpu/bfloat16_rounding.h"
#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "ops/cpu/x86/avx512/avx512_kernels.h"
#include "rayless/ops/autocast_scope.h"

namespace rayless::ops::cpu {

namespace {

float round_bf16(float f) { return widen_bfloat16(bfloat16_like_copy(f)); }

// elements [begin, end): the formulas of autograd's ops, each rounding where they round
void rows_scalar(const uint16_t* gate, const uint16_t* up, const uint16_t* grad, uint16_t* product,
                 uint16_t* grad_gate, uint16_t* grad_up, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float x = widen_bfloat16(gate[i]), u = widen_bfloat16(up[i]), d = widen_bfloat16(grad[i]);
    const float denominator = 1.0f + std::exp(-x);
    const float sigmoid = 1.0f / denominator;
    const float silu = round_bf16(x / denominator);  // torch::silu(gate)
    product[i] = bfloat16_like_copy(silu * u);
    grad_up[i] = bfloat16_like_copy(d * silu);
    const float dy = round_bf16(d * u);  // grad * up
    grad_gate[i] = bfloat16_like_copy(dy * sigmoid * (1.0f + x * (1.0f - sigmoid)));
  }
}

// silu(gate) * up, then the down projection (no bias), keeping gate, up and the weight: the product,
// an intermediate-sized tensor per token and layer, is recomputed in backward instead of kept as the
// projection's saved input. Under autocast gate and up are already in the compute dtype and the weight
// is cast to it, as the projection's linear does. The backward is autograd's arithmetic for the linear
// (linear_grads), the weight's cast and silu_times, the last in one pass in bfloat16
// (silu_times_backward: every element autograd's or a neighbouring bfloat16 value).
struct SiluTimesDown : public torch::autograd::Function<SiluTimesDown> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up, const torch::Tensor& weight) {
    ctx->save_for_backward({gate, up, weight});
    return bfloat16_aware_linear(torch::silu(gate) * up, weight.to(gate.scalar_type()), torch::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& gate = saved[0];
    const auto& up = saved[1];
    const auto& weight = saved[2];
    // the product's gradient first (the down projection's input gradient, as linear_grads computes
    // it), then gate's and up's with the product recomputed in one pass, then the weight's
    const torch::Tensor grad_2d = grad_outputs[0].reshape({-1, grad_outputs[0].size(-1)});
    const torch::Tensor grad_product = bfloat16_aware_mm(grad_2d, weight.to(gate.scalar_type())).reshape(gate.sizes());
    const SiluTimesGrads elementwise = ops::silu_times_backward(gate, up, grad_product);
    return {elementwise.grad_gate, elementwise.grad_up,
            linear_weight_grad(grad_outputs[0], elementwise.product).to(weight.scalar_type())};
  }
};

}  // namespace

torch::Tensor silu_times_down(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& weight) {
  // checked bit for bit on the CPU only, as linear: GPUs keep autograd's linear until a device run
  // compares them
  if (!kernel_plan().on(Kernel::silu_times_down) || !torch::GradMode::is_enabled()) return {};
  if (!weight.requires_grad() || !gate.is_contiguous() || !up.is_contiguous() || gate.sizes() != up.sizes() ||
      gate.scalar_type() != up.scalar_type() || (gate.dim() != 2 && gate.dim() != 3))
    return {};
  // the dtype the down projection computes in, which the product must have: autocast's for a float32
  // weight it lowers, else the weight's
  if (gate.scalar_type() != autocast_compute_dtype(weight.device().type(), weight.scalar_type())) return {};
  return SiluTimesDown::apply(gate, up, weight);
}

bool silu_times_backward(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad,
                         SiluTimesGrads* grads) {
  const bool fits = gate.device().is_cpu() && gate.scalar_type() == at::kBFloat16 &&
                    up.scalar_type() == at::kBFloat16 && grad.scalar_type() == at::kBFloat16 &&
                    gate.sizes() == up.sizes() && gate.sizes() == grad.sizes() && gate.is_contiguous() &&
                    up.is_contiguous() && grad.is_contiguous() && up.device().is_cpu() && grad.device().is_cpu();
  if (!fits || !kernel_plan().on(Kernel::silu_times_one_pass_backward)) return false;
  SiluTimesGrads out{torch::empty_like(gate), torch::empty_like(gate), torch::empty_like(gate)};
  const auto* g = static_cast<const uint16_t*>(gate.data_ptr());
  const auto* u = static_cast<const uint16_t*>(up.data_ptr());
  const auto* d = static_cast<const uint16_t*>(grad.data_ptr());
  auto* p = static_cast<uint16_t*>(out.product.data_ptr());
  auto* gg = static_cast<uint16_t*>(out.grad_gate.data_ptr());
  auto* gu = static_cast<uint16_t*>(out.grad_up.data_ptr());
  const int64_t count = gate.numel();
  int64_t done = 0;
#ifdef RAYLESS_X86_KERNELS
  if (kernel_plan().on(Kernel::avx512_silu_times_backward)) done = avx512::silu_times_backward_rows(g, u, d, p, gg, gu, count);
#endif
  rows_scalar(g, u, d, p, gg, gu, done, count);
  *grads = out;
  return true;
}

torch::Tensor decode_silu_times(const torch::Tensor& gate_up) {
  if (!kernel_plan().on(Kernel::avx2_decode_silu_times)) return {};
  return avx2::decode_silu_times(gate_up);
}

}  // namespace rayless::ops::cpu
