// AdamW's scalars as torch's kernels see them, converted once to the compute type: shared by the
// portable single-pass loop (cpu/adamw_update.cpp) and its vector loops (x86/avx512, x86/avx2), all
// built with the same flags (-ffp-contract=off -fno-math-errno -O3, CMakeLists.txt). Private to src/ops.
#pragma once
#include <cmath>

#include "rayless/ops/ops.h"

namespace rayless::ops {

template <typename opmath_t>
struct Scalars {
  opmath_t decay, grad_scale, one_minus_beta1, beta2, one_minus_beta2, bias_correction2_sqrt, step_size, eps;
  explicit Scalars(const AdamWHyper& h)
      : decay(static_cast<opmath_t>(1 - h.lr * h.weight_decay)),
        grad_scale(static_cast<opmath_t>(h.grad_scale)),
        one_minus_beta1(static_cast<opmath_t>(1 - h.beta1)),
        beta2(static_cast<opmath_t>(h.beta2)),
        one_minus_beta2(static_cast<opmath_t>(1 - h.beta2)),
        bias_correction2_sqrt(static_cast<opmath_t>(std::sqrt(1 - std::pow(h.beta2, double(h.step))))),
        step_size(static_cast<opmath_t>(-(h.lr / (1 - std::pow(h.beta1, double(h.step)))))),
        eps(static_cast<opmath_t>(h.eps)) {}
};

}  // namespace rayless::ops
