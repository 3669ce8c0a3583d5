// Experiment (docs/benchmarks.md, "The decode step's RMSNorm, silu and softmax in one pass"): one call of
// a decode step's RMSNorm and silu(gate) * up alone, rayless's float32 kernels (model/decode_rms_norm.h,
// model/decode_silu_times.h) against the LibTorch operators the model called before, on one thread, at
// the benchmark models' shapes (tiny: hidden 256, intermediate 704; small: 640 and 1792). Best of 2000
// calls each, in microseconds. Not part of the build.
//
//   T=.venv/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++17 -w -Iinclude -I$T/include -I$T/include/torch/csrc/api/include \
//       tools/bench/experiments/decode_pointwise_calls.cpp build/librayless_model.a build/librayless_base.a \
//       -L$T/lib -Wl,-rpath,$T/lib -ltorch_cpu -lc10 -o /tmp/decode_pointwise_calls && /tmp/decode_pointwise_calls
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include "ops/cpu/x86/avx2/decode_rms_norm.h"
#include "ops/cpu/x86/avx2/decode_silu_times.h"
#include "rayless/ops/rms_norm.h"

using namespace rayless;

namespace {
double best_microseconds(const std::function<torch::Tensor()>& call) {
  double best = 1e30;
  for (int i = 0; i < 2000; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto out = call();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}
}  // namespace

int main() {
  at::set_num_threads(1);
  torch::NoGradGuard no_grad;
  std::printf("| rows | hidden | rms_norm LibTorch | rms_norm kernel | intermediate | silu*up LibTorch | silu*up kernel |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{{256, 704}, {640, 1792}}) {
    const int64_t hidden = shape.first, intermediate = shape.second;
    for (const int64_t rows : {1, 16, 32}) {
      const auto x = torch::randn({rows, 1, hidden}), weight = torch::randn({hidden});
      const auto gate_up = torch::randn({rows, 1, 2 * intermediate}) * 4;
      const double norm_libtorch = best_microseconds([&] { return rms_norm(x, weight, 1e-6); });
      const double norm_kernel = best_microseconds([&] { return decode_rms_norm(x, weight, 1e-6); });
      const double silu_libtorch = best_microseconds([&] {
        return torch::silu(gate_up.narrow(-1, 0, intermediate)) * gate_up.narrow(-1, intermediate, intermediate);
      });
      const double silu_kernel = best_microseconds([&] { return decode_silu_times(gate_up); });
      std::printf("| %lld | %lld | %.1f | %.1f | %lld | %.1f | %.1f |\n", static_cast<long long>(rows),
                  static_cast<long long>(hidden), norm_libtorch, norm_kernel, static_cast<long long>(intermediate),
                  silu_libtorch, silu_kernel);
    }
  }
  return 0;
}
