// Generation's weights on the CPU: laid out once for the AMX tile kernel (amx_linear), the AVX2 rows
// kernel (avx2_linear) or oneDNN's packed kernel (onednn_linear), in that order where the plan has them
// and they fit, and the products on that layout; see ops.h, GenerationLinear. oneDNN's linear runs
// through the dispatcher: LibTorch registers the mkldnn:: ops but ships no C++ declarations for them.
#include "ops/cpu/cpu_backend.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

#include "ops/backend.h"
#include "ops/cpu/x86/amx/amx_kernels.h"
#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "rayless/base/error.h"

namespace rayless::ops::cpu {

namespace {
const std::optional<c10::OperatorHandle>& reorder_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_reorder_linear_weight", ""});
  return op;
}
const std::optional<c10::OperatorHandle>& linear_op() {
  static const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  return op;
}

bool packable(const torch::Tensor& weight, torch::ScalarType dtype) {
  const bool dtype_ok = dtype == torch::kFloat32 || (dtype == torch::kBFloat16 && onednn_bfloat16_supported());
  return kernel_plan().on(Kernel::onednn_linear) && weight.device().is_cpu() && dtype_ok;
}

torch::Tensor onednn_packed(const torch::Tensor& fused) {
  torch::jit::Stack stack{fused, c10::IValue()};
  reorder_op()->callBoxed(&stack);
  return stack.at(0).toTensor();
}
}  // namespace

bool onednn_linear_available() { return at::hasMKLDNN() && reorder_op() && linear_op(); }

bool onednn_bfloat16_supported() {
  static const bool supported = [] {
    const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
    if (!op) return false;
    torch::jit::Stack stack;
    op->callBoxed(&stack);
    return stack.at(0).toBool();
  }();
  return supported;
}

bool pack_generation_weight(const std::vector<torch::Tensor>& parts, torch::ScalarType compute_dtype, bool widened,
                            PackedWeight* out) {
  const torch::Tensor& first = parts.front();
  if (!first.device().is_cpu()) return false;
  int64_t outputs = 0;
  for (const auto& part : parts) outputs += part.size(0);
  const KernelPlan& plan = kernel_plan();
  if (widened) {  // the bfloat16 values in float32, one part: float32 kernels at every row count
    if (plan.on(Kernel::avx2_linear)) {
      *out = PackedWeight{avx2::pack(parts), Kernel::avx2_linear, 0};
    } else if (packable(first, torch::kFloat32)) {
      *out = PackedWeight{onednn_packed(first), Kernel::onednn_linear, 1};
    } else {
      return false;
    }
    return true;
  }
  const bool cast = first.scalar_type() != compute_dtype;
  if (compute_dtype == torch::kBFloat16 && plan.on(Kernel::amx_linear) && amx::fits(outputs, first.size(1))) {
    *out = PackedWeight{amx::pack(parts), Kernel::amx_linear, 0};  // cast and laid out in one pass, no fused copy first
  } else if (compute_dtype == torch::kFloat32 && !cast && plan.on(Kernel::avx2_linear)) {
    *out = PackedWeight{avx2::pack(parts), Kernel::avx2_linear, 0};  // laid out from the parts in one pass
  } else if (packable(first, compute_dtype)) {
    *out = PackedWeight{onednn_packed(fused_in(parts, compute_dtype)), Kernel::onednn_linear,
                        compute_dtype == torch::kFloat32 ? GenerationLinear::kPackedMinRowsFloat32 : 1};
  } else {
    return false;
  }
  return true;
}

torch::Tensor packed_linear(const PackedWeight& packed, const torch::Tensor& x, int64_t outputs,
                            const torch::Tensor& bias) {
  switch (packed.kernel) {
    case Kernel::amx_linear: return amx::linear(x, packed.data, outputs, bias);
    case Kernel::avx2_linear: return avx2::linear(x, packed.data, outputs, bias);
    case Kernel::onednn_linear: {
      torch::jit::Stack stack{x, packed.data, bias.defined() ? c10::IValue(bias) : c10::IValue(),
                              c10::IValue(std::string("none")), c10::IValue(c10::List<std::optional<at::Scalar>>()),
                              c10::IValue(std::string(""))};
      linear_op()->callBoxed(&stack);
      return stack.at(0).toTensor();
    }
    default: runtimeCheck(false, "packed_linear: no CPU kernel ", KernelPlan::name(packed.kernel));
  }
  return {};
}

}  // namespace rayless::ops::cpu
