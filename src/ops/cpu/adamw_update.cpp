// AdamW's single pass on the CPU (adamw_single_pass), its float32 loop on AVX-512 or AVX2 where the
// plan has them; see ops.h, adamw_update. Built with -ffp-contract=off -fno-math-errno -O3
// (CMakeLists.txt): every element's result must not depend on where it lies in a tensor (ZeRO updates
// slices), so no fused multiply-add contraction, whatever -march the user adds; -O3 lets the loop use
// vector instructions, which round each element as the scalar ones do.
#include "ops/cpu/cpu_backend.h"

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "ops/cpu/adamw_scalars.h"
#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "ops/cpu/x86/avx512/avx512_kernels.h"
#include "rayless/base/error.h"

namespace rayless::ops::cpu {

namespace {

template <typename scalar_t>
void update_range(scalar_t* __restrict param, const scalar_t* __restrict grad, scalar_t* __restrict exp_avg,
                  scalar_t* __restrict exp_avg_sq, int64_t begin, int64_t end, const AdamWHyper& h) {
  using opmath_t = at::opmath_type<scalar_t>;
  const Scalars<opmath_t> c(h);
  for (int64_t i = begin; i < end; ++i) {
    opmath_t p = static_cast<opmath_t>(param[i]) * c.decay;
    // the clip's product, rounded to the gradient's dtype as mul_ would store it
    const opmath_t g = static_cast<scalar_t>(static_cast<opmath_t>(grad[i]) * c.grad_scale);
    opmath_t m = exp_avg[i];
    m = m + c.one_minus_beta1 * (g - m);
    opmath_t v = exp_avg_sq[i];
    v = v * c.beta2 + c.one_minus_beta2 * g * g;
    const opmath_t denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    p = p + c.step_size * (m / denom);
    param[i] = static_cast<scalar_t>(p);
    exp_avg[i] = static_cast<scalar_t>(m);
    exp_avg_sq[i] = static_cast<scalar_t>(v);
  }
}

// The elements the vector loop updates, from `begin`; returns where the scalar loop goes on.
template <typename scalar_t>
int64_t update_vector_part(scalar_t*, const scalar_t*, scalar_t*, scalar_t*, int64_t begin, int64_t, const AdamWHyper&) {
  return begin;  // float32 only
}
int64_t update_vector_part(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t begin,
                           int64_t end, const AdamWHyper& h) {
#ifdef RAYLESS_X86_KERNELS
  const KernelPlan& plan = kernel_plan();
  if (plan.on(Kernel::avx512_adamw)) return avx512::adamw_update_float(param, grad, exp_avg, exp_avg_sq, begin, end, h);
  if (plan.on(Kernel::avx2_adamw)) return avx2::adamw_update_float(param, grad, exp_avg, exp_avg_sq, begin, end, h);
#endif
  return begin;
}

}  // namespace

bool adamw_update(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                  const AdamWHyper& hyper) {
  if (!kernel_plan().on(Kernel::adamw_single_pass)) return false;
  auto check = [&](const torch::Tensor& t) {
    runtimeCheck(t.scalar_type() == param.scalar_type() && t.numel() == param.numel() && t.is_contiguous() &&
                     t.device() == param.device(),
                 "adamw_update: tensors of one dtype, size and device, contiguous");
  };
  check(param);
  check(grad);
  check(exp_avg);
  check(exp_avg_sq);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, param.scalar_type(), "adamw_update", [&] {
    scalar_t* p = param.data_ptr<scalar_t>();
    const scalar_t* g = grad.data_ptr<scalar_t>();
    scalar_t* m = exp_avg.data_ptr<scalar_t>();
    scalar_t* v = exp_avg_sq.data_ptr<scalar_t>();
    at::parallel_for(0, param.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      begin = update_vector_part(p, g, m, v, begin, end, hyper);
      update_range(p, g, m, v, begin, end, hyper);
    });
  });
  return true;
}

}  // namespace rayless::ops::cpu
