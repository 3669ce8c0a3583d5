#include "rayless/ops/silu_times_backward.h"

#include <ATen/ops/silu_backward.h>

#include <cmath>
#include <cstdint>

#include "rayless/base/cpu_features.h"

#include "bfloat16_rounding.h"

namespace rayless {

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

#ifdef RAYLESS_X86_KERNELS
RAYLESS_AVX512_INTRINSICS_BEGIN
// e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), e^r by its Taylor
// series to r^7 (remainder below 6e-9 relative, under float32's 6e-8 step), times 2^n by scalef, which
// gives inf and 0 beyond float32's range
__attribute__((target("avx512f"))) inline __m512 exp_ps(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

__attribute__((target("avx512f"))) void rows_avx512(const uint16_t* gate, const uint16_t* up, const uint16_t* grad,
                                                     uint16_t* product, uint16_t* grad_gate, uint16_t* grad_up,
                                                     int64_t count) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i + 16 <= count; i += 16) {
    const __m512 x = avx512::load_bfloat16(gate + i), u = avx512::load_bfloat16(up + i), d = avx512::load_bfloat16(grad + i);
    const __m512 denominator = _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x)));
    const __m512 sigmoid = _mm512_div_ps(one, denominator);
    const __m512 silu = avx512::round_to_bfloat16(_mm512_div_ps(x, denominator));
    avx512::store_bfloat16(product + i, _mm512_mul_ps(silu, u));
    avx512::store_bfloat16(grad_up + i, _mm512_mul_ps(d, silu));
    const __m512 dy = avx512::round_to_bfloat16(_mm512_mul_ps(d, u));
    const __m512 slope = _mm512_add_ps(one, _mm512_mul_ps(x, _mm512_sub_ps(one, sigmoid)));
    avx512::store_bfloat16(grad_gate + i, _mm512_mul_ps(_mm512_mul_ps(dy, sigmoid), slope));
  }
}
RAYLESS_AVX512_INTRINSICS_END
#endif

}  // namespace

SiluTimesGrads silu_times_backward(const torch::Tensor& gate, const torch::Tensor& up, const torch::Tensor& grad) {
  const bool fits = gate.device().is_cpu() && gate.scalar_type() == at::kBFloat16 &&
                    up.scalar_type() == at::kBFloat16 && grad.scalar_type() == at::kBFloat16 &&
                    gate.sizes() == up.sizes() && gate.sizes() == grad.sizes() && gate.is_contiguous() &&
                    up.is_contiguous() && grad.is_contiguous() && up.device().is_cpu() && grad.device().is_cpu();
  if (!fits) {
    const torch::Tensor silu = torch::silu(gate);
    return {silu * up, at::silu_backward(grad * up, gate), grad * silu};
  }
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
  if (cpu_has_avx512f()) {
    rows_avx512(g, u, d, p, gg, gu, count);
    done = count / 16 * 16;
  }
#endif
  rows_scalar(g, u, d, p, gg, gu, done, count);
  return out;
}

}  // namespace rayless
