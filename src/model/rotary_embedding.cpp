#include "rayless/model/rotary_embedding.h"

#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include "rayless/base/cpu_features.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless {

namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

torch::Tensor rotated(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;
}

// dx for `rows` vectors of D, the tables of vector i at row i / heads: with half = D / 2,
//   dx[j] = g[j] cos[j] + g[j + half] sin[j + half],  dx[j + half] = g[j + half] cos[j + half] - g[j] sin[j]
// (the transpose of x -> x cos + rotate_half(x) sin), rounded to bfloat16 once.
void backward_scalar(const float* g, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
                     c10::BFloat16* dx) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r, g += D, dx += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; ++j) {
      dx[j] = c10::BFloat16(g[j] * c[j] + g[j + half] * s[j + half]);
      dx[j + half] = c10::BFloat16(g[j + half] * c[j + half] - g[j] * s[j]);
    }
  }
}

#ifdef RAYLESS_X86_KERNELS
// float32 -> bfloat16, round to nearest even, NaN to 0x7FC0: c10::BFloat16's rounding, 16 at a time
__attribute__((target("avx512f"))) void store_bfloat16(c10::BFloat16* out, __m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(rounded));
}

__attribute__((target("avx512f"))) void backward_avx512(const float* g, const float* cos, const float* sin,
                                                         int64_t rows, int64_t heads, int64_t D, c10::BFloat16* dx) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r, g += D, dx += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; j += 16) {
      const __m512 low = _mm512_loadu_ps(g + j), high = _mm512_loadu_ps(g + j + half);
      store_bfloat16(dx + j, _mm512_add_ps(_mm512_mul_ps(low, _mm512_loadu_ps(c + j)),
                                           _mm512_mul_ps(high, _mm512_loadu_ps(s + j + half))));
      store_bfloat16(dx + j + half, _mm512_sub_ps(_mm512_mul_ps(high, _mm512_loadu_ps(c + j + half)),
                                                  _mm512_mul_ps(low, _mm512_loadu_ps(s + j))));
    }
  }
}
#endif

struct RotaryOnePassBackward : public torch::autograd::Function<RotaryOnePassBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rotated(x, cos, sin);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto cos = saved[0].contiguous(), sin = saved[1].contiguous();
    const auto g = grad_outputs[0].to(at::kFloat).contiguous();
    const int64_t N = g.size(0), H = g.size(1), D = g.size(2);
    auto dx = torch::empty({N, H, D}, g.options().dtype(at::kBFloat16));
    auto* vectors_backward = &backward_scalar;
#ifdef RAYLESS_X86_KERNELS
    if (cpu_has_avx512f() && D % 32 == 0) vectors_backward = &backward_avx512;
#endif
    vectors_backward(g.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), N * H, H, D,
                     dx.data_ptr<c10::BFloat16>());
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool rotary_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x.device().is_cpu() && x.scalar_type() == at::kBFloat16 && x.dim() == 3 && x.size(-1) % 2 == 0 &&
         cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.dim() == 3 &&
         cos.sizes() == sin.sizes() && cos.size(0) == x.size(0) && cos.size(1) == 1 && cos.size(2) == x.size(2) &&
         torch::GradMode::is_enabled() && x.requires_grad() && !cos.requires_grad() && !sin.requires_grad();
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (rotary_backward_in_one_pass(x, cos, sin)) return RotaryOnePassBackward::apply(x, cos, sin);
  return rotated(x, cos, sin);
}

}  // namespace rayless
