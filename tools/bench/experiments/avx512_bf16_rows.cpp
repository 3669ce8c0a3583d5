// Experiment (docs/notes/bench-xeon.md, "Not kept: a hand-written AVX-512 BF16 small-row product"): how fast
// can one core multiply r = 1, 4, 16 bfloat16 rows by a bfloat16 weight with vdpbf16ps, against
// oneDNN's packed kernel that generate() uses? Not part of the build; needs a CPU with AVX512_BF16.
//
//   g++ -O3 -march=sapphirerapids tools/bench/experiments/avx512_bf16_rows.cpp -o /tmp/bf16_rows && /tmp/bf16_rows
//
// The weight [N, K] is stored as VNNI pairs, [N/16][K/2][16][2]: one 64-byte load holds two k of 16
// outputs, and each row's pair of inputs is broadcast to meet it, so no horizontal sums are needed.
// Two blocks of 16 outputs go at once (more loads in flight). Each product reads its own copy of the
// weight from a pool of about 400 MB, so the weights come from memory, as in decoding. Prints the best
// of five passes in µs and GB/s of weight read, and the largest difference from a double-precision sum.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <int Rows>
void product(const uint16_t* packed, const uint16_t* x, float* out, int n, int k) {
  const int pairs = k / 2;
  for (int block = 0; block < n / 16; block += 2) {
    __m512 first[Rows], second[Rows];
    for (int r = 0; r < Rows; ++r) first[r] = second[r] = _mm512_setzero_ps();
    const uint16_t* w0 = packed + static_cast<size_t>(block) * pairs * 32;
    const uint16_t* w1 = w0 + static_cast<size_t>(pairs) * 32;
    for (int p = 0; p < pairs; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(w0 + p * 32) + 2048, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w1 + p * 32) + 2048, _MM_HINT_T0);
      const auto a = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w0 + p * 32));
      const auto b = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w1 + p * 32));
      for (int r = 0; r < Rows; ++r) {
        int32_t pair;
        std::memcpy(&pair, x + static_cast<size_t>(r) * k + 2 * p, 4);
        const auto xs = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
        first[r] = _mm512_dpbf16_ps(first[r], xs, a);
        second[r] = _mm512_dpbf16_ps(second[r], xs, b);
      }
    }
    for (int r = 0; r < Rows; ++r) {
      _mm512_storeu_ps(out + static_cast<size_t>(r) * n + block * 16, first[r]);
      _mm512_storeu_ps(out + static_cast<size_t>(r) * n + block * 16 + 16, second[r]);
    }
  }
}

template <int Rows>
void measure(const char* name, int n, int k) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::vector<uint16_t> packed(static_cast<size_t>(n) * k), x(static_cast<size_t>(Rows) * k);
  for (auto& w : packed) w = to_bf16(0.1f * uniform(rng));
  for (auto& v : x) v = to_bf16(uniform(rng));
  std::vector<float> out(static_cast<size_t>(Rows) * n);
  const int copies = std::max(1, static_cast<int>(400e6 / (packed.size() * 2)));
  std::vector<std::vector<uint16_t>> pool(copies, packed);
  double best = 1e9;
  for (int pass = 0; pass < 5; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& weight : pool) product<Rows>(weight.data(), x.data(), out.data(), n, k);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / copies);
  }
  double worst = 0;  // against a double sum over the unpacked layout, every 37th output
  for (int r = 0; r < Rows; ++r)
    for (int o = 0; o < n; o += 37) {
      double sum = 0;
      for (int i = 0; i < k; ++i)
        sum += from_bf16(x[static_cast<size_t>(r) * k + i]) *
               from_bf16(packed[(static_cast<size_t>(o / 16) * (k / 2) + i / 2) * 32 + (o % 16) * 2 + i % 2]);
      worst = std::max(worst, std::abs(sum - out[static_cast<size_t>(r) * n + o]));
    }
  std::printf("%-8s rows %2d  [%d, %d]: %7.1f us  %5.2f GB/s  max |diff| %.1e\n", name, Rows, n, k, best * 1e6,
              static_cast<double>(n) * k * 2 / best / 1e9, worst);
}

template <int... Rows>
void measure_rows(const char* name, int n, int k) {
  (measure<Rows>(name, n, k), ...);
}

}  // namespace

int main() {
  measure_rows<1, 4, 8, 16>("gate/up", 3584, 640);
  measure_rows<1, 4, 8, 16>("down", 640, 1792);
  measure_rows<1, 4, 8, 16>("q/k/v", 896, 640);
}
