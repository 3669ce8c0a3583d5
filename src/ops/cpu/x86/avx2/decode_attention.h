// The attention of one decode step on the CPU in float32, for CPUs with AVX2 and FMA.
//
// A decode step holds one query per row. LibTorch's scaled_dot_product_attention runs its CPU flash
// kernel there, built for blocks of queries: per call it builds an additive mask from the boolean one,
// allocates and fills its buffers and runs small matrix products. At 16 rows of the tiny benchmark
// model (4/2 heads, 64 keys) that took 140-180 microseconds per layer against this kernel's 74-76,
// which is then mostly reading the layer's 1 MB of keys and values from the L3 cache
// (docs/benchmarks.md, "The decode step's attention in one pass"). Here each (row, head) takes one
// pass over its keys (dot products with FMA), the exponentials of its scores (src/model/avx2_exp.h,
// within 2 ulp; they replaced one LibTorch exp_ over all rows' scores, about a tenth of the call), and
// one pass over its values. The result is the attention's softmax(q k^T * scale) v over the allowed keys, within float32
// rounding of LibTorch's (sums in another order); it does not depend on the thread count.
#pragma once
#include <torch/types.h>

#include <string>

namespace rayless {

// The CPU has AVX2 and FMA and the kernel is not switched off (set_decode_attention_enabled, or
// RAYLESS_AVX2=0 in the environment, which also turns off the AVX2 products of avx2_linear.h).
bool decode_attention_available();
// For tests and measurements: use or ignore the kernel from now on (where available otherwise).
void set_decode_attention_enabled(bool enabled);
// Which kernel a decode step's attention runs on, and why (`rayless version` prints it).
std::string describe_decode_attention();

// softmax(q k^T * scale + mask) v for one query per row: q [B, H, 1, D], k and v [B, H_kv, S, D] (H a
// multiple of H_kv: grouped-query attention, each kv head serving H / H_kv query heads), each with
// unit stride along D, allowed bool [B or 1, 1, 1, S] (true = may attend) -> [B, 1, H * D] float32
// (the heads side by side). Returns an undefined tensor where the kernel does not apply, and the
// caller runs LibTorch's attention: a kernel not available, operands not float32 on the CPU or of
// other shapes, autocast lowering float32, gradients wanted, or a row with no allowed key.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed, double scale);

}  // namespace rayless
