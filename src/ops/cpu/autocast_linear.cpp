// Training's projections under autocast on the CPU (autocast_linear): autocast's linear bit for bit,
// holding the float32 weight for backward and one cast of an input the projections share; see ops.h,
// linear.
#include "ops/cpu/cpu_backend.h"

#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>

#include "rayless/ops/autocast_scope.h"

namespace rayless::ops {

namespace {
// The last input cast, for the projections that share it (q, k and v; gate and up): autocast casts
// the input once per projection, and autograd keeps each cast for backward.
struct LastInputCast {
  torch::Tensor x;  // held, so that no other tensor can take its address while remembered
  int64_t version = -1;
  torch::Tensor low;
};
thread_local LastInputCast last_input_cast;

torch::Tensor input_in(const torch::Tensor& x, at::ScalarType low) {
  if (x.scalar_type() == low) return x.detach();
  if (last_input_cast.x.defined() && last_input_cast.x.unsafeGetTensorImpl() == x.unsafeGetTensorImpl() &&
      last_input_cast.version == x._version() && last_input_cast.low.scalar_type() == low)
    return last_input_cast.low;
  torch::NoGradGuard no_grad;  // the function's backward casts the input's gradient back itself
  last_input_cast = LastInputCast{x, x._version(), x.to(low)};
  return last_input_cast.low;
}

// The backward repeats autograd's formulas for the ops autocast's linear runs (the input's cast,
// the weight's and bias's casts, then addmm or mm on the input flattened to 2 dimensions), on operands
// of the same values, sizes and strides, so the kernels and their roundings are the same.
struct AutocastLinear : public torch::autograd::Function<AutocastLinear> {
  // x: the input as given; x_low: it in the compute dtype (no gradient of its own); bias: an empty
  // placeholder when has_bias is false (apply() takes no undefined tensors)
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& x_low, const torch::Tensor& weight, const torch::Tensor& bias,
                               bool has_bias) {
    const auto low = x_low.scalar_type();
    ctx->save_for_backward({x_low, weight});
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(has_bias ? bias.scalar_type() : low);
    // what autocast's linear calls: at::linear on the cast operands (widened where train.bf16_products
    // says: ops.h)
    const torch::Tensor weight_low = weight.to(low);
    return bfloat16_aware_linear(x_low, weight_low, has_bias ? bias.to(low) : torch::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x_low = saved[0];
    const torch::Tensor& weight = saved[1];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const auto input_dtype = static_cast<at::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    // the weight cast again, not kept from forward; each cast's gradient is cast back
    const LinearGrads grads = linear_grads(grad_outputs[0], x_low, weight.to(x_low.scalar_type()));
    torch::Tensor grad_bias;
    if (has_bias) {
      const auto bias_dtype = static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
      const torch::Tensor grad_2d = grad_outputs[0].reshape({-1, grad_outputs[0].size(-1)});
      grad_bias = at::sum_to(grad_2d, c10::IntArrayRef{grad_2d.size(1)}).to(bias_dtype);  // addmm's broadcast bias
    }
    return {grads.input.to(input_dtype), torch::Tensor(), grads.weight.to(weight.scalar_type()), grad_bias,
            torch::Tensor()};
  }
};
}  // namespace

void clear_autocast_linear_casts() { last_input_cast = LastInputCast{}; }

bool autocast_linear_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!kernel_plan().on(Kernel::autocast_linear)) return false;
  if (!torch::GradMode::is_enabled() || !weight.requires_grad() || weight.scalar_type() != at::kFloat) return false;
  // checked bit for bit against autocast on the CPU only; GPUs keep autocast's own linear until a
  // device run compares them (tests/devices)
  if (!weight.device().is_cpu()) return false;
  const auto low = autocast_compute_dtype(weight.device().type(), at::kFloat);
  if (low == at::kFloat) return false;  // autocast is off
  // autocast casts a float32 input and passes one in its own dtype; at::linear then runs addmm or mm
  // on the input as a 2-dimensional view, row-major
  if (x.scalar_type() != at::kFloat && x.scalar_type() != low) return false;
  return (x.dim() == 2 || x.dim() == 3) && x.is_contiguous() && x.stride(-1) == 1;
}

torch::Tensor cpu::linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!autocast_linear_applies(x, weight)) return {};
  const auto low = autocast_compute_dtype(weight.device().type(), at::kFloat);
  const bool has_bias = bias.defined();
  return AutocastLinear::apply(x, input_in(x, low), weight, has_bias ? bias : torch::empty({0}, weight.options()),
                               has_bias);
}

}  // namespace rayless::ops
