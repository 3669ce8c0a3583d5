// transposed (ops.h): x.t().contiguous() bit for bit, through the AVX-512 blocks and the portable tiles
// alike.
#include <catch2/catch.hpp>

#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

TEST_CASE("transposed gives x.t().contiguous() bit for bit, blocks and edges") {
  // the AVX-512 blocks where the CPU has them, and the portable tiles alone
  const bool vector_blocks = GENERATE(true, false);
  const KernelOverride blocks(Kernel::avx512_transpose, vector_blocks);
  INFO("AVX-512 blocks " << (kernel_plan().on(Kernel::avx512_transpose) ? "on" : "off (portable tiles only)"));
  // whole 32 x 16 blocks; ragged rows and columns; narrower than one block either way; one row or column
  const std::vector<std::pair<int64_t, int64_t>> shapes{{64, 32},  {1474, 1792}, {1474, 128}, {77, 45},
                                                        {31, 15},  {33, 17},     {1, 640},    {640, 1}, {5, 3}};
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    for (const auto& [rows, cols] : shapes) {
      INFO(dtype << " [" << rows << ", " << cols << "]");
      // distinct bit patterns: a misplaced element cannot go unnoticed
      const auto x = torch::arange(rows * cols, torch::kInt32).remainder(65521).to(torch::kInt16).view(dtype).view({rows, cols});
      const auto t = transposed(x);
      CHECK(t.is_contiguous());
      CHECK(t.sizes() == torch::IntArrayRef{cols, rows});
      CHECK(torch::equal(t.view(torch::kInt16), x.t().contiguous().view(torch::kInt16)));
    }
  }
}

TEST_CASE("transposed: a strided input, and other dtypes, as LibTorch's copy") {
  const auto wide = torch::randn({96, 80}).to(torch::kBFloat16);
  const auto columns = wide.narrow(1, 8, 48);  // not contiguous
  CHECK(torch::equal(transposed(columns), columns.t().contiguous()));
  const auto f = torch::randn({40, 24});
  CHECK(torch::equal(transposed(f), f.t().contiguous()));
}
