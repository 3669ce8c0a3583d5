// bfloat16 products as train.bf16_products says: LibTorch's own, or widened to float32 on the backends
// that widen them (the CPU); see ops.h.
#include "backend.h"

#include <ATen/autocast_mode.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace rayless::ops {

bool widens_bfloat16_product(const torch::Tensor& a, const torch::Tensor& b) {
  return bfloat16_products() == BFloat16Products::float32 && a.scalar_type() == at::kBFloat16 &&
         b.scalar_type() == at::kBFloat16 && backend_for(a.device()).widens_bfloat16_products &&
         backend_for(b.device()).widens_bfloat16_products;
}

namespace {
// linear on operands already widened (x and the weight holding bfloat16 values in float32), rounded
// once to bfloat16. The product is a float32 one: autocast, where on, would lower it back to bfloat16.
torch::Tensor rounded_float32_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return torch::linear(x, weight, bias).to(at::kBFloat16);
}
}  // namespace

// The widened products are float32 ones: autocast, where on, would lower them back to bfloat16.
torch::Tensor bfloat16_aware_mm(const torch::Tensor& a, const torch::Tensor& b) {
  if (!widens_bfloat16_product(a, b)) return a.mm(b);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return a.to(at::kFloat).mm(b.to(at::kFloat)).to(at::kBFloat16);
}

torch::Tensor bfloat16_aware_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!widens_bfloat16_product(x, weight)) return torch::linear(x, weight, bias);
  const torch::Tensor wide_bias = bias.defined() ? bias.to(at::kFloat) : torch::Tensor();
  return rounded_float32_linear(x.to(at::kFloat), weight.to(at::kFloat), wide_bias);
}

namespace {
// The last weight linear_as_autocast widened, as autocast keeps its last casts: the LM head is
// multiplied at every decode step, and widening its float32 weight again each time cost as much as
// the product. Dropped with autocast's own cache (AutocastScope's end: forget_widened_weight).
struct WidenedWeight {
  torch::Tensor weight;  // held, so that no other tensor can take its address while remembered
  int64_t version = -1;
  torch::Tensor widened;  // weight rounded to bfloat16, in float32
};
thread_local WidenedWeight last_widened;

const torch::Tensor& widened_weight(const torch::Tensor& weight) {
  if (!last_widened.weight.defined() || last_widened.weight.unsafeGetTensorImpl() != weight.unsafeGetTensorImpl() ||
      last_widened.version != weight._version()) {
    torch::NoGradGuard no_grad;
    last_widened = WidenedWeight{weight, weight._version(), weight.to(at::kBFloat16).to(at::kFloat)};
  }
  return last_widened.widened;
}
}  // namespace

void forget_widened_weight() { last_widened = WidenedWeight{}; }

torch::Tensor linear_as_autocast(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const bool lowered = weight.scalar_type() == at::kFloat && weight.device().is_cpu() &&
                       at::autocast::is_autocast_enabled(at::kCPU) &&
                       at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
  if (!lowered || bfloat16_products() != BFloat16Products::float32) return torch::linear(x, weight, bias);
  const auto low = at::kBFloat16;
  // a weight that trains here gets its gradient through autograd's casts; one that does not is
  // widened once (the LM head during generation, frozen weights)
  if (torch::GradMode::is_enabled() && weight.requires_grad())
    return bfloat16_aware_linear(x.to(low), weight.to(low), bias.defined() ? bias.to(low) : torch::Tensor());
  const torch::Tensor wide_bias = bias.defined() ? bias.to(low).to(at::kFloat) : torch::Tensor();
  return rounded_float32_linear(x.to(low).to(at::kFloat), widened_weight(weight), wide_bias);
}

}  // namespace rayless::ops
