// The gradient norm's sum of squares on the CPU in one pass (sum_of_squares_single_pass), its float32
// loop on AVX-512 or AVX2 where the plan has them; see ops.h, sum_of_squares.
#include "ops/cpu/cpu_backend.h"

#include <ATen/Dispatch.h>

#include "ops/cpu/x86/avx2/avx2_kernels.h"
#include "ops/cpu/x86/avx512/avx512_kernels.h"

namespace rayless::ops::cpu {

namespace {
// The whole groups of 8 the vector loop sums; returns where the scalar loop goes on.
template <typename scalar_t>
int64_t squares_vector_part(const scalar_t*, int64_t, double*) {
  return 0;  // float32 only
}
int64_t squares_vector_part(const float* x, int64_t n, double partial[8]) {
#ifdef RAYLESS_X86_KERNELS
  const KernelPlan& plan = kernel_plan();
  if (plan.on(Kernel::avx512_sum_of_squares)) return avx512::sum_of_squares_float(x, n, partial);
  if (plan.on(Kernel::avx2_sum_of_squares)) return avx2::sum_of_squares_float(x, n, partial);
#endif
  return 0;
}
}  // namespace

bool sum_of_squares(const torch::Tensor& t, double* out) {
  if (!kernel_plan().on(Kernel::sum_of_squares_single_pass)) return false;
  torch::NoGradGuard no_grad;
  double sum = 0;
  // one pass, eight float64 partial sums (no float64 copy of the tensor)
  const torch::Tensor flat = t.detach().contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, flat.scalar_type(), "sum_of_squares", [&] {
    const scalar_t* x = flat.data_ptr<scalar_t>();
    const int64_t n = flat.numel();
    double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    i = squares_vector_part(x, n, partial);
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) {
        const double v = static_cast<double>(x[i + j]);
        partial[j] += v * v;
      }
    for (; i < n; ++i) partial[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    sum = ((partial[0] + partial[1]) + (partial[2] + partial[3])) + ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  });
  *out = sum;
  return true;
}

}  // namespace rayless::ops::cpu
