// float32 decode products with AVX2 and FMA (avx2_linear); see avx2_kernels.h. The kernel carries its
// own target attribute, so the rest of the build needs no AVX2 flags; it runs only where the plan found
// the instructions.
#include "avx2_kernels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

#include "rayless/base/cpu_features.h"
#include "rayless/base/error.h"

#ifdef RAYLESS_X86_KERNELS
#include <immintrin.h>
#endif

namespace rayless::ops::avx2 {

namespace {
constexpr int64_t kOutputsPerBlock = 16;  // two 8-float registers per row
constexpr int kMaxGroupRows = 6;          // 6 rows x 2 registers of sums, 2 of weights, 1 of input

int64_t blocks_of(int64_t out) { return (out + kOutputsPerBlock - 1) / kOutputsPerBlock; }

#ifdef RAYLESS_X86_KERNELS
// y[r, 0..15] = x[r, :] . block[:, 0..15] for R rows: each input's 16 weights loaded once for all R
// rows, each sum a chain of FMAs over the inputs in order. The sums are named registers, not an array:
// GCC kept an array of __m256 in memory and stored it back at every input. The next block's line for
// the same input is prefetched into L2 meanwhile: the first group of rows waits on memory otherwise,
// while the others compute from the cache (15-35 % per product at 8-16 rows on the AMD EPYC).
template <int R>
__attribute__((target("avx2,fma"))) void multiply_rows(const float* x, int64_t in, const float* block,
                                                       const float* next_block, float* sums) {
  __m256 s00 = _mm256_setzero_ps(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00, s31 = s00,
         s40 = s00, s41 = s00, s50 = s00, s51 = s00;
#define RAYLESS_AVX2_ROW(i)                                                   \
  if constexpr (R > i) {                                                      \
    const __m256 value = _mm256_broadcast_ss(x + i * in + q);                 \
    s##i##0 = _mm256_fmadd_ps(value, low, s##i##0);                           \
    s##i##1 = _mm256_fmadd_ps(value, high, s##i##1);                          \
  }
  for (int64_t q = 0; q < in; ++q) {
    const __m256 low = _mm256_loadu_ps(block + q * kOutputsPerBlock);
    const __m256 high = _mm256_loadu_ps(block + q * kOutputsPerBlock + 8);
    _mm_prefetch(reinterpret_cast<const char*>(next_block + q * kOutputsPerBlock), _MM_HINT_T1);
    RAYLESS_AVX2_ROW(0) RAYLESS_AVX2_ROW(1) RAYLESS_AVX2_ROW(2) RAYLESS_AVX2_ROW(3) RAYLESS_AVX2_ROW(4)
    RAYLESS_AVX2_ROW(5)
  }
#undef RAYLESS_AVX2_ROW
#define RAYLESS_AVX2_STORE(i)                                          \
  if constexpr (R > i) {                                               \
    _mm256_storeu_ps(sums + i * kOutputsPerBlock, s##i##0);            \
    _mm256_storeu_ps(sums + i * kOutputsPerBlock + 8, s##i##1);        \
  }
  RAYLESS_AVX2_STORE(0) RAYLESS_AVX2_STORE(1) RAYLESS_AVX2_STORE(2) RAYLESS_AVX2_STORE(3) RAYLESS_AVX2_STORE(4)
  RAYLESS_AVX2_STORE(5)
#undef RAYLESS_AVX2_STORE
}

void multiply_group(int rows, const float* x, int64_t in, const float* block, const float* next_block, float* sums) {
  switch (rows) {
    case 1: return multiply_rows<1>(x, in, block, next_block, sums);
    case 2: return multiply_rows<2>(x, in, block, next_block, sums);
    case 3: return multiply_rows<3>(x, in, block, next_block, sums);
    case 4: return multiply_rows<4>(x, in, block, next_block, sums);
    case 5: return multiply_rows<5>(x, in, block, next_block, sums);
    default: return multiply_rows<6>(x, in, block, next_block, sums);
  }
}
#endif
}  // namespace

torch::Tensor pack(const std::vector<torch::Tensor>& parts) {
  runtimeCheck(!parts.empty(), "avx2::pack: no weight");
  const int64_t in = parts.front().dim() == 2 ? parts.front().size(1) : -1;
  std::vector<torch::Tensor> contiguous;
  std::vector<const float*> rows;  // the stacked weight's rows, in order
  for (const auto& part : parts) {
    runtimeCheck(part.dim() == 2 && part.size(1) == in && in > 0 && part.scalar_type() == torch::kFloat32 &&
                     part.device().is_cpu(),
                 "avx2::pack: expected [out_i, in] float32 CPU weights, got ", part.sizes(), " ", part.scalar_type());
    contiguous.push_back(part.contiguous());
    for (int64_t n = 0; n < part.size(0); ++n) rows.push_back(contiguous.back().data_ptr<float>() + n * in);
  }
  const auto out = static_cast<int64_t>(rows.size());
  auto packed = torch::empty({blocks_of(out) * kOutputsPerBlock * in}, torch::kFloat32);
  float* to = packed.data_ptr<float>();
  at::parallel_for(0, blocks_of(out), 1, [&](int64_t first, int64_t last) {
    const float* zeros_row = nullptr;
    std::vector<float> zeros;
    for (int64_t block = first; block < last; ++block) {
      const float* src[kOutputsPerBlock];
      for (int64_t j = 0; j < kOutputsPerBlock; ++j) {
        const int64_t n = block * kOutputsPerBlock + j;
        if (n >= out && !zeros_row) zeros.assign(static_cast<size_t>(in), 0.0f), zeros_row = zeros.data();
        src[j] = n < out ? rows[static_cast<size_t>(n)] : zeros_row;
      }
      float* dst = to + block * kOutputsPerBlock * in;  // written in order: 16 read streams, one write stream
      for (int64_t q = 0; q < in; ++q)
        for (int64_t j = 0; j < kOutputsPerBlock; ++j) *dst++ = src[j][q];
    }
  });
  return packed;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out, const torch::Tensor& bias) {
  runtimeCheck(x.dim() == 2 && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.device().is_cpu() &&
                   packed.scalar_type() == torch::kFloat32 && out > 0 &&
                   packed.numel() == blocks_of(out) * kOutputsPerBlock * x.size(1) &&
                   (!bias.defined() ||
                    (bias.numel() == out && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32)),
               "avx2::linear: unexpected operands x ", x.sizes(), " ", x.scalar_type(), ", packed ", packed.numel(),
               ", out ", out);
  runtimeCheck(cpu_has_avx2() && cpu_has_fma(), "avx2::linear called where the CPU has no AVX2 with FMA");
  const int64_t rows = x.size(0), in = x.size(1);
  auto y = torch::empty({rows, out}, x.options());
  if (rows == 0) return y;
#ifdef RAYLESS_X86_KERNELS
  const float* input = x.data_ptr<float>();
  const float* weight = packed.data_ptr<float>();
  const float* bias_values = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* output = y.data_ptr<float>();
  // rows split into groups of at most 6, as even as they go (16 -> 6, 5, 5): every group re-reads the
  // block's weights, from the cache after the first
  const int64_t groups = (rows + kMaxGroupRows - 1) / kMaxGroupRows;
  at::parallel_for(0, blocks_of(out), 1, [&](int64_t first, int64_t last) {
    alignas(32) float sums[kMaxGroupRows * kOutputsPerBlock];
    for (int64_t block = first; block < last; ++block) {
      const int64_t first_output = block * kOutputsPerBlock;
      const int64_t width = std::min(kOutputsPerBlock, out - first_output);
      int64_t row = 0;
      for (int64_t g = 0; g < groups; ++g) {
        const int group_rows = static_cast<int>(rows / groups + (g < rows % groups ? 1 : 0));
        const float* block_weights = weight + first_output * in;
        const float* next = block + 1 < last ? block_weights + kOutputsPerBlock * in : block_weights;
        multiply_group(group_rows, input + row * in, in, block_weights, next, sums);
        for (int r = 0; r < group_rows; ++r) {
          float* to = output + (row + r) * out + first_output;
          for (int64_t j = 0; j < width; ++j)
            to[j] = bias_values ? sums[r * kOutputsPerBlock + j] + bias_values[first_output + j]
                                : sums[r * kOutputsPerBlock + j];
        }
        row += group_rows;
      }
    }
  });
#endif
  return y;
}

}  // namespace rayless::ops::avx2
