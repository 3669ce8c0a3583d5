#include "rayless/ops/rotary.h"

#include <ATen/autocast_mode.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>


#include "bfloat16_rounding.h"
#include "rayless/base/cpu_features.h"

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
RAYLESS_AVX512_INTRINSICS_BEGIN
__attribute__((target("avx512f"))) void backward_avx512(const float* g, const float* cos, const float* sin,
                                                         int64_t rows, int64_t heads, int64_t D, c10::BFloat16* dx) {
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r, g += D, dx += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; j += 16) {
      const __m512 low = _mm512_loadu_ps(g + j), high = _mm512_loadu_ps(g + j + half);
      avx512::store_bfloat16(dx + j, _mm512_add_ps(_mm512_mul_ps(low, _mm512_loadu_ps(c + j)),
                                                   _mm512_mul_ps(high, _mm512_loadu_ps(s + j + half))),
                             0x7FC0);
      avx512::store_bfloat16(dx + j + half, _mm512_sub_ps(_mm512_mul_ps(high, _mm512_loadu_ps(c + j + half)),
                                                  _mm512_mul_ps(low, _mm512_loadu_ps(s + j))),
                             0x7FC0);  // c10::BFloat16's NaN, as backward_scalar
    }
  }
}
RAYLESS_AVX512_INTRINSICS_END
#endif

// The forward for `rows` bfloat16 vectors of D, the tables of vector i at row i / heads: ATen's
// x * cos + rotate_half(x) * sin (each product and the sum rounded in float32; rotate_half's negation is
// exact), then the cast to bfloat16 that autocast's attention makes of it (rounded to nearest even,
// NaN to 0xFFFF as LibTorch's copy): one pass where ATen made six. No fused multiply-add.
__attribute__((optimize("fp-contract=off"))) void forward_scalar(const c10::BFloat16* x, const float* cos,
                                                                 const float* sin, int64_t rows, int64_t heads,
                                                                 int64_t D, c10::BFloat16* out) {
  const int64_t half = D / 2;
  const auto to_bfloat16 = [](float f) { return c10::BFloat16(bfloat16_like_copy(f), c10::BFloat16::from_bits()); };
  for (int64_t r = 0; r < rows; ++r, x += D, out += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; ++j) {
      const float low = x[j], high = x[j + half];
      const float first = low * c[j], second = -high * s[j];
      out[j] = to_bfloat16(first + second);
      const float third = high * c[j + half], fourth = low * s[j + half];
      out[j + half] = to_bfloat16(third + fourth);
    }
  }
}

#ifdef RAYLESS_X86_KERNELS
RAYLESS_AVX512_INTRINSICS_BEGIN
__attribute__((target("avx512f"), optimize("fp-contract=off"))) void forward_avx512(
    const c10::BFloat16* x, const float* cos, const float* sin, int64_t rows, int64_t heads, int64_t D,
    c10::BFloat16* out) {
  const int64_t half = D / 2;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r, x += D, out += D) {
    const float *c = cos + (r / heads) * D, *s = sin + (r / heads) * D;
    for (int64_t j = 0; j < half; j += 16) {
      const __m512 low = avx512::load_bfloat16(x + j), high = avx512::load_bfloat16(x + j + half);
      const __m512 negated_high = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(high), _mm512_castps_si512(sign)));
      avx512::store_bfloat16(out + j, _mm512_add_ps(_mm512_mul_ps(low, _mm512_loadu_ps(c + j)),
                                   _mm512_mul_ps(negated_high, _mm512_loadu_ps(s + j))));
      avx512::store_bfloat16(out + j + half, _mm512_add_ps(_mm512_mul_ps(high, _mm512_loadu_ps(c + j + half)),
                                          _mm512_mul_ps(low, _mm512_loadu_ps(s + j + half))));
    }
  }
}
RAYLESS_AVX512_INTRINSICS_END
#endif

struct RotaryOnePassBackward : public torch::autograd::Function<RotaryOnePassBackward> {
  // under bfloat16 autocast, in bfloat16: the float32 result as the attention's autocast casts it
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    if (!at::autocast::is_autocast_enabled(at::kCPU) || at::autocast::get_autocast_dtype(at::kCPU) != at::kBFloat16)
      return rotated(x, cos, sin);
    const auto input = x.contiguous(), cos_c = cos.contiguous(), sin_c = sin.contiguous();
    const int64_t N = input.size(0), H = input.size(1), D = input.size(2);
    auto out = torch::empty({N, H, D}, input.options());
    auto* vectors_forward = &forward_scalar;
#ifdef RAYLESS_X86_KERNELS
    if (cpu_has_avx512f() && D % 32 == 0) vectors_forward = &forward_avx512;
#endif
    vectors_forward(input.data_ptr<c10::BFloat16>(), cos_c.data_ptr<float>(), sin_c.data_ptr<float>(), N * H, H, D,
                    out.data_ptr<c10::BFloat16>());
    return out;
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
