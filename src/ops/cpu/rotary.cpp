// The rotary embedding on the CPU in training: the one-pass forward and backward node (rotary_one_pass),
// its loops on AVX-512 where they fit (avx512_rotary_forward, avx512_rotary_backward); see ops.h,
// apply_rotary.
#include "ops/cpu/cpu_backend.h"

#include <ATen/autocast_mode.h>
#include <c10/util/BFloat16.h>
#include <torch/autograd.h>

#include "ops/cpu/bfloat16_rounding.h"
#include "ops/cpu/x86/avx512/avx512_kernels.h"
#include "ops/reference.h"
#include "rayless/ops/autocast_scope.h"

namespace rayless::ops {

namespace {

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

struct RotaryOnePassBackward : public torch::autograd::Function<RotaryOnePassBackward> {
  // under bfloat16 autocast, in bfloat16: the float32 result as the attention's autocast casts it
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    if (!at::autocast::is_autocast_enabled(at::kCPU) || at::autocast::get_autocast_dtype(at::kCPU) != at::kBFloat16)
      return reference::rotated(x, cos, sin);
    const auto input = x.contiguous(), cos_c = cos.contiguous(), sin_c = sin.contiguous();
    const int64_t N = input.size(0), H = input.size(1), D = input.size(2);
    auto out = torch::empty({N, H, D}, input.options());
    auto* vectors_forward = &forward_scalar;
#ifdef RAYLESS_X86_KERNELS
    if (kernel_plan().on(Kernel::avx512_rotary_forward) && D % 32 == 0) vectors_forward = &avx512::rotary_forward;
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
    if (kernel_plan().on(Kernel::avx512_rotary_backward) && D % 32 == 0) vectors_backward = &avx512::rotary_backward;
#endif
    vectors_backward(g.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), N * H, H, D,
                     dx.data_ptr<c10::BFloat16>());
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool rotary_backward_in_one_pass(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return kernel_plan().on(Kernel::rotary_one_pass) && x.device().is_cpu() && x.scalar_type() == at::kBFloat16 && x.dim() == 3 && x.size(-1) % 2 == 0 &&
         cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.dim() == 3 &&
         cos.sizes() == sin.sizes() && cos.size(0) == x.size(0) && cos.size(1) == 1 && cos.size(2) == x.size(2) &&
         torch::GradMode::is_enabled() && x.requires_grad() && !cos.requires_grad() && !sin.requires_grad();
}

std::pair<torch::Tensor, torch::Tensor> cpu::decode_rotary(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!kernel_plan().on(Kernel::decode_rotary) || !rotates_for_decoding(q, k, cos, sin)) return {};
  // straight into the dtype the attention computes in (autocast's, as its cast and the cache's would give)
  return rotate_for_decoding(q, k, cos, sin, autocast_compute_dtype(q.device().type(), torch::kFloat32));
}

torch::Tensor cpu::apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!rotary_backward_in_one_pass(x, cos, sin)) return {};
  return RotaryOnePassBackward::apply(x, cos, sin);
}

}  // namespace rayless::ops
