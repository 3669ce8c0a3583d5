// A 2-byte matrix transposed in tiles on the CPU (transpose_tiles), its whole blocks on AVX-512
// (avx512_transpose); see ops.h, transposed.
#include "ops/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdint>

#include "ops/cpu/x86/avx512/avx512_kernels.h"

namespace rayless::ops::cpu {

namespace {

// out[c][r] = in[r][c] over rows [r0, r1) and columns [c0, c1) of an in[rows][cols] matrix
void transpose_scalar(const uint16_t* in, uint16_t* out, int64_t rows, int64_t cols, int64_t r0, int64_t r1,
                      int64_t c0, int64_t c1) {
  constexpr int64_t kTile = 32;  // a tile's rows and columns stay in L1 while it is read and written
  for (int64_t rt = r0; rt < r1; rt += kTile)
    for (int64_t ct = c0; ct < c1; ct += kTile)
      for (int64_t c = ct; c < std::min(c1, ct + kTile); ++c)
        for (int64_t r = rt; r < std::min(r1, rt + kTile); ++r) out[c * rows + r] = in[r * cols + c];
}

}  // namespace

torch::Tensor transposed(const torch::Tensor& x) {
  if (x.dim() != 2 || !x.device().is_cpu() || x.element_size() != 2 || !kernel_plan().on(Kernel::transpose_tiles))
    return {};
  const torch::Tensor in = x.contiguous();
  const int64_t rows = in.size(0), cols = in.size(1);
  torch::Tensor out = torch::empty({cols, rows}, in.options());
  const auto* src = static_cast<const uint16_t*>(in.data_ptr());
  auto* dst = static_cast<uint16_t*>(out.data_ptr());
  int64_t row_blocks = 0, col_blocks = 0;  // the part the vector kernel covers
#ifdef RAYLESS_X86_KERNELS
  if (kernel_plan().on(Kernel::avx512_transpose)) {
    row_blocks = rows / 32;
    col_blocks = cols / 16;
    avx512::transpose_blocks(src, dst, rows, cols, row_blocks, col_blocks);
  }
#endif
  const int64_t covered_rows = row_blocks * 32, covered_cols = col_blocks * 16;
  transpose_scalar(src, dst, rows, cols, 0, covered_rows, covered_cols, cols);  // right edge
  transpose_scalar(src, dst, rows, cols, covered_rows, rows, 0, cols);          // bottom rows
  return out;
}

}  // namespace rayless::ops::cpu
