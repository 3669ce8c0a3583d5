// Experiment (docs/benchmarks.md, "The decode step's attention in one pass"): one decode step's
// attention call alone, rayless's float32 kernel (model/decode_attention.h) against LibTorch's
// scaled_dot_product_attention as the model called it, on one thread, at the benchmark models' head
// shapes. Each call reuses the same operands, so keys and values come from the cache, as one layer's
// do in a decode step. Not part of the build.
//
//   T=.venv/lib/python3.11/site-packages/torch
//   g++ -O2 -std=c++17 -w -Iinclude -I$T/include -I$T/include/torch/csrc/api/include \
//       tools/bench/experiments/decode_attention_calls.cpp build/librayless_model.a build/librayless_base.a \
//       -L$T/lib -Wl,-rpath,$T/lib -ltorch_cpu -lc10 -o /tmp/decode_attention_calls && /tmp/decode_attention_calls
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <tuple>
#include <vector>

#include "ops/cpu/x86/avx2/decode_attention.h"

int main() {
  at::set_num_threads(1);
  torch::NoGradGuard no_grad;
  const int64_t dim = 64;
  // rows, heads, kv heads, keys: the tiny model (4/2 heads) and the small one (10/2)
  for (const auto& [rows, heads, kv_heads, keys] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 4, 2, 64}, {16, 4, 2, 64}, {32, 4, 2, 64}, {16, 10, 2, 64}, {16, 10, 2, 300}}) {
    const auto q = torch::randn({rows, heads, 1, dim});
    const auto k = torch::randn({rows, kv_heads, keys, dim}), v = torch::randn({rows, kv_heads, keys, dim});
    const auto allowed = torch::ones({rows, 1, 1, keys}, torch::kBool);
    const double scale = 0.125;
    const auto microseconds = [](const auto& call) {
      for (int i = 0; i < 50; ++i) call();
      const int calls = 500;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) call();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
    };
    const double kernel = microseconds([&] { return rayless::decode_attention(q, k, v, allowed, scale); });
    const double libtorch = microseconds([&] {
      return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, false, scale, kv_heads != heads)
          .transpose(1, 2)
          .reshape({rows, 1, heads * dim});
    });
    std::printf("rows %2lld, heads %2lld/%lld, keys %3lld: kernel %6.1f us, LibTorch %6.1f us (%.2fx)\n",
                (long long)rows, (long long)heads, (long long)kv_heads, (long long)keys, kernel, libtorch,
                libtorch / kernel);
  }
}
