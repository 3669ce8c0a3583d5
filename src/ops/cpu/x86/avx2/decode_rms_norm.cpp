// A decode step's float32 RMSNorm in one pass per row (avx2_decode_rms_norm); see avx2_kernels.h. The
// loop carries its own target attribute, as in linear_rows.cpp: it runs only where the plan found the
// instructions.
#include "avx2_kernels.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "rayless/base/cpu_features.h"
#include "rayless/ops/autocast_scope.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless::ops::avx2 {

namespace {
// rows per task: a row of a few thousand floats is a microsecond or less
constexpr int64_t kRowsPerTask = 64;

#ifdef RAYLESS_X86_KERNELS
// One row: the sum of squares as one chain of 8-float FMAs (the register reduced in a fixed order, then
// the remainder), r = 1 / sqrt(sum / D + eps) as mean, add and rsqrt round it, then
// out = w * (x * r), two roundings as LibTorch's two products.
__attribute__((target("avx2,fma"))) void normalise_row(const float* x, const float* w, int64_t n, float eps,
                                                       float* out) {
  __m256 squares = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 xi = _mm256_loadu_ps(x + i);
    squares = _mm256_fmadd_ps(xi, xi, squares);
  }
  __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(squares), _mm256_extractf128_ps(squares, 1));
  sum4 = _mm_hadd_ps(sum4, sum4);
  sum4 = _mm_hadd_ps(sum4, sum4);
  float sum = _mm_cvtss_f32(sum4);
  for (; i < n; ++i) sum = std::fma(x[i], x[i], sum);
  const float mean = sum / static_cast<float>(n);
  const float r = 1.0f / std::sqrt(mean + eps);
  const __m256 r8 = _mm256_set1_ps(r);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(w + i), _mm256_mul_ps(_mm256_loadu_ps(x + i), r8)));
  for (; i < n; ++i) out[i] = w[i] * (x[i] * r);
}
#endif

bool applies(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!x.defined() || !weight.defined()) return false;
  if (!x.device().is_cpu() || !weight.device().is_cpu()) return false;
  if (x.scalar_type() != torch::kFloat32 || weight.scalar_type() != torch::kFloat32) return false;
  // one position per row (a decode step); prefill and scoring passes keep LibTorch's operators
  if (x.dim() != 3 || x.size(1) != 1 || x.size(2) == 0 || !x.is_contiguous()) return false;
  if (weight.dim() != 1 || weight.size(0) != x.size(2) || !weight.is_contiguous()) return false;
  if (c10::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad())) return false;
  return autocast_compute_dtype(at::kCPU, torch::kFloat32) == torch::kFloat32;
}
}  // namespace

torch::Tensor decode_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (!applies(x, weight)) return {};
#ifdef RAYLESS_X86_KERNELS
  const int64_t rows = x.size(0), n = x.size(2);
  const float* x_data = x.data_ptr<float>();
  const float* w_data = weight.data_ptr<float>();
  auto out = torch::empty_like(x);
  float* out_data = out.data_ptr<float>();
  // the reference adds eps to a float32 mean: the same float32 value
  const auto eps_f = static_cast<float>(eps);
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) normalise_row(x_data + row * n, w_data, n, eps_f, out_data + row * n);
  });
  return out;
#else
  return {};
#endif
}

}  // namespace rayless::ops::avx2
