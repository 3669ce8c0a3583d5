// Generation's float32 silu(gate) * up in one pass (avx2_decode_silu_times); see avx2_kernels.h. The
// loop carries its own target attribute, as in linear_rows.cpp: it runs only where the plan found the
// instructions.
#include "avx2_kernels.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <vector>

#include "exp8.h"
#include "rayless/base/cpu_features.h"
#include "rayless/ops/autocast_scope.h"

namespace rayless::ops::avx2 {

namespace {
// rows per task: a decode row of a few thousand floats is a microsecond or two
constexpr int64_t kRowsPerTask = 16;

#ifdef RAYLESS_X86_KERNELS
// gate / (1 + e^-gate) * up, 8 at a time: silu's formula, then the product
__attribute__((target("avx2,fma"))) inline __m256 silu_times_8(__m256 gate, __m256 up) {
  const __m256 e = exp8(_mm256_xor_ps(gate, _mm256_set1_ps(-0.0f)));  // e^-gate
  return _mm256_mul_ps(_mm256_div_ps(gate, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}

// One row, the last n % 8 through a zero-padded register so that every element takes the same arithmetic
__attribute__((target("avx2,fma"))) void silu_times_row(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, silu_times_8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    for (int64_t j = i; j < n; ++j) g[j - i] = gate[j], u[j - i] = up[j];
    _mm256_store_ps(o, silu_times_8(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
  }
}
#endif

bool applies(const torch::Tensor& gate_up) {
  if (!gate_up.defined() || !gate_up.device().is_cpu() || gate_up.scalar_type() != torch::kFloat32) return false;
  if (gate_up.dim() == 0 || gate_up.size(-1) == 0 || gate_up.size(-1) % 2 != 0 || !gate_up.is_contiguous()) return false;
  if (c10::GradMode::is_enabled() && gate_up.requires_grad()) return false;
  return autocast_compute_dtype(at::kCPU, torch::kFloat32) == torch::kFloat32;
}
}  // namespace

torch::Tensor decode_silu_times(const torch::Tensor& gate_up) {
  if (!applies(gate_up)) return {};
#ifdef RAYLESS_X86_KERNELS
  const int64_t width = gate_up.size(-1), half = width / 2, rows = gate_up.numel() / width;
  std::vector<int64_t> out_sizes = gate_up.sizes().vec();
  out_sizes.back() = half;
  auto out = torch::empty(out_sizes, gate_up.options());
  const float* in = gate_up.data_ptr<float>();
  float* out_data = out.data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row)
      silu_times_row(in + row * width, in + row * width + half, half, out_data + row * half);
  });
  return out;
#else
  return {};
#endif
}

}  // namespace rayless::ops::avx2
