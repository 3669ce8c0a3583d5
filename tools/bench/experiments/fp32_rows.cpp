// Experiment (docs/notes/bench-xeon.md, "AMX tiles for the decode step's products", float32 part): can a
// hand-written AVX-512 float32 kernel beat oneDNN's packed one on a decode product at 16 rows? The
// weight is stored as [N/64][K][64]; six rows at a time keep 6 x 4 accumulators; panels of Kc inputs
// are walked by every group of rows while the next panel is prefetched. Each product reads its own
// copy of the weight from a 400 MB pool (generation's 213 MB float32 copy does not stay in cache).
// Not part of the build; needs AVX-512. Compare: build/rayless-bench products --config-json MODEL/config.json --pool-mb 400
//
//   g++ -O3 -march=native tools/bench/experiments/fp32_rows.cpp -o /tmp/fp32_rows && /tmp/fp32_rows
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {
constexpr int kBlock = 64;

std::vector<float> pack(const std::vector<float>& w, int n, int k) {
  std::vector<float> p(static_cast<size_t>(n) * k);
  size_t i = 0;
  for (int b = 0; b < n / kBlock; ++b)
    for (int q = 0; q < k; ++q)
      for (int j = 0; j < kBlock; ++j) p[i++] = w[static_cast<size_t>(b * kBlock + j) * k + q];
  return p;
}

// out[R rows][64] (+)= x[R rows][q0:q1] w[q0:q1][64], prefetching `per_step` lines of the next panel a step
template <int R>
void panel(const float* w, const float* x, int k, float* out, int n, int q0, int q1, const char* next, int per_step) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = q0 == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(out + r * n + j * 16);
  for (int q = q0; q < q1; ++q) {
    for (int l = 0; l < per_step; ++l) _mm_prefetch(next + ((q - q0) * per_step + l) * 64, _MM_HINT_T0);
    const float* wq = w + q * kBlock;
    const __m512 w0 = _mm512_loadu_ps(wq), w1 = _mm512_loadu_ps(wq + 16), w2 = _mm512_loadu_ps(wq + 32),
                 w3 = _mm512_loadu_ps(wq + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(x[r * k + q]);
      acc[r][0] = _mm512_fmadd_ps(b, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(b, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(b, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(b, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(out + r * n + j * 16, acc[r][j]);
}

template <int Kc>
void product(const float* packed, const float* x, float* out, int rows, int n, int k) {
  const int groups = (rows + 5) / 6;
  const char* end = reinterpret_cast<const char*>(packed + static_cast<size_t>(n) * k);
  for (int b = 0; b < n / kBlock; ++b) {
    const float* w = packed + static_cast<size_t>(b) * k * kBlock;
    for (int q0 = 0; q0 < k; q0 += Kc) {
      const int q1 = std::min(k, q0 + Kc);
      const char* next = reinterpret_cast<const char*>(w + static_cast<size_t>(q1) * kBlock);
      const int per_step = next < end ? (Kc * 4 + groups * (q1 - q0) - 1) / (groups * (q1 - q0)) : 0;
      for (int g = 0; g < groups; ++g) {
        const int r0 = g * 6;
        const char* pf = next + static_cast<size_t>(g) * (q1 - q0) * per_step * 64;
        const float* xr = x + static_cast<size_t>(r0) * k;
        float* o = out + static_cast<size_t>(r0) * n + b * kBlock;
        switch (std::min(6, rows - r0)) {
          case 1: panel<1>(w, xr, k, o, n, q0, q1, pf, per_step); break;
          case 2: panel<2>(w, xr, k, o, n, q0, q1, pf, per_step); break;
          case 3: panel<3>(w, xr, k, o, n, q0, q1, pf, per_step); break;
          case 4: panel<4>(w, xr, k, o, n, q0, q1, pf, per_step); break;
          case 5: panel<5>(w, xr, k, o, n, q0, q1, pf, per_step); break;
          default: panel<6>(w, xr, k, o, n, q0, q1, pf, per_step); break;
        }
      }
    }
  }
}

template <int Kc>
void measure(const char* name, int rows, int n, int k) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::vector<float> w(static_cast<size_t>(n) * k), x(static_cast<size_t>(rows) * k);
  for (auto& v : w) v = 0.1f * uniform(rng);
  for (auto& v : x) v = uniform(rng);
  const auto packed = pack(w, n, k);
  std::vector<float> out(static_cast<size_t>(rows) * n);
  const int copies = std::max(1, static_cast<int>(400e6 / (packed.size() * 4)));
  std::vector<std::vector<float>> pool(copies, packed);
  double best = 1e9;
  for (int pass = 0; pass < 5; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& weight : pool) product<Kc>(weight.data(), x.data(), out.data(), rows, n, k);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / copies);
  }
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < n; o += 7) {
      double sum = 0;
      for (int q = 0; q < k; ++q) sum += double(w[static_cast<size_t>(o) * k + q]) * x[static_cast<size_t>(r) * k + q];
      worst = std::max(worst, std::fabs(sum - out[static_cast<size_t>(r) * n + o]));
    }
  std::printf("float32 %-8s Kc %3d rows %2d: %7.1f us  %5.1f GB/s  %6.1f GFLOP/s  max |diff| %.1e\n", name, Kc, rows,
              best * 1e6, static_cast<double>(n) * k * 4 / best / 1e9, 2.0 * rows * n * k / best / 1e9, worst);
}
}  // namespace

int main() {
  for (const int rows : {4, 16}) measure<8>("gate/up", rows, 3584, 640);
  measure<32>("gate/up", 16, 3584, 640);
  measure<8>("down", 16, 640, 1792);
  measure<8>("q/k/v", 16, 896, 640);
}
