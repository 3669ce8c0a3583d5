// One decode step's rotary embedding in one pass (decode_rotary); see ops.h, decode_rotary. Built with
// -ffp-contract=off (CMakeLists.txt): a fused multiply-add would round once where LibTorch's operators
// round twice.
#include "ops/cpu/cpu_backend.h"

#include <c10/util/BFloat16.h>

#include "rayless/base/error.h"

namespace rayless::ops::cpu {

namespace {
bool takes_dtype(const torch::Tensor& x) { return x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32; }

bool rotatable(const torch::Tensor& x, int64_t rows, int64_t dim) {
  return x.device().is_cpu() && x.dim() == 3 && x.size(0) == rows && x.size(2) == dim && x.stride(2) == 1 &&
         takes_dtype(x);
}

template <typename In, typename Out>
void rotate_rows(const torch::Tensor& x, const float* cos, const float* sin, torch::Tensor& out) {
  const int64_t rows = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  const int64_t row_stride = x.stride(0), head_stride = x.stride(1);
  const In* in = x.data_ptr<In>();
  Out* o = out.data_ptr<Out>();  // [rows, heads, 1, dim], contiguous
  for (int64_t b = 0; b < rows; ++b) {
    const float* c = cos + b * dim;
    const float* s = sin + b * dim;
    for (int64_t h = 0; h < heads; ++h) {
      const In* v = in + b * row_stride + h * head_stride;
      Out* r = o + (b * heads + h) * dim;
      for (int64_t d = 0; d < half; ++d) {  // rotate_half: -x[d + half] here
        const float product = static_cast<float>(v[d]) * c[d];
        const float rotated = -static_cast<float>(v[d + half]) * s[d];
        r[d] = static_cast<Out>(product + rotated);
      }
      for (int64_t d = half; d < dim; ++d) {  // and x[d - half] here
        const float product = static_cast<float>(v[d]) * c[d];
        const float rotated = static_cast<float>(v[d - half]) * s[d];
        r[d] = static_cast<Out>(product + rotated);
      }
    }
  }
}

template <typename In>
void rotate_into(const torch::Tensor& x, const float* cos, const float* sin, torch::Tensor& out) {
  if (out.scalar_type() == torch::kBFloat16)
    rotate_rows<In, c10::BFloat16>(x, cos, sin, out);
  else
    rotate_rows<In, float>(x, cos, sin, out);
}

torch::Tensor rotated(const torch::Tensor& x, const float* cos, const float* sin, torch::ScalarType out_dtype) {
  auto out = torch::empty({x.size(0), x.size(1), 1, x.size(2)}, x.options().dtype(out_dtype));
  if (x.scalar_type() == torch::kBFloat16)
    rotate_into<c10::BFloat16>(x, cos, sin, out);
  else
    rotate_into<float>(x, cos, sin, out);
  return out;
}
}  // namespace

bool rotates_for_decoding(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  if (!q.defined() || q.dim() != 3 || cos.dim() != 3) return false;
  const int64_t rows = q.size(0), dim = q.size(2);
  const auto table_ok = [&](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.size(0) == rows && t.size(1) == 1 &&
           t.size(2) == dim && t.is_contiguous();
  };
  return dim % 2 == 0 && rotatable(q, rows, dim) && rotatable(k, rows, dim) && table_ok(cos) && table_ok(sin);
}

std::pair<torch::Tensor, torch::Tensor> rotate_for_decoding(const torch::Tensor& q, const torch::Tensor& k,
                                                            const torch::Tensor& cos, const torch::Tensor& sin,
                                                            torch::ScalarType out_dtype) {
  runtimeCheck(rotates_for_decoding(q, k, cos, sin) && (out_dtype == torch::kBFloat16 || out_dtype == torch::kFloat32),
               "rotate_for_decoding: q ", q.sizes(), " ", q.scalar_type(), ", k ", k.sizes(), " ", k.scalar_type(),
               ", cos ", cos.sizes(), " ", cos.scalar_type(), ", out ", out_dtype);
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  return {rotated(q, c, s, out_dtype), rotated(k, c, s, out_dtype)};
}

}  // namespace rayless::ops::cpu
