// Experiment (docs/benchmarks.md, "AMX tiles for the decode step's products"): how fast one core reads
// a buffer it reads over and over, by the buffer's size. Up to the last-level cache's share the reads
// come from that cache, beyond it from memory; a decode step reads its weights once per step, so which
// of the two it gets depends on whether the weights fit. Not part of the build; needs AVX-512.
//
//   g++ -O3 -march=native tools/bench/experiments/read_by_size.cpp -o /tmp/read_by_size && /tmp/read_by_size
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

int main() {
  for (const double megabytes : {1.0, 3.0, 16.0, 50.0, 107.0, 200.0, 400.0, 1600.0}) {
    const size_t lines = static_cast<size_t>(megabytes * 1e6 / 64);
    auto* buffer = static_cast<__m512i*>(std::aligned_alloc(64, lines * 64));
    for (size_t i = 0; i < lines; ++i) buffer[i] = _mm512_set1_epi32(static_cast<int>(i));
    const int repeats = std::max(1, static_cast<int>(2000 / megabytes));
    __m512i first = _mm512_setzero_si512(), second = first;
    double best = 1e9;
    for (int pass = 0; pass < 3; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      for (int r = 0; r < repeats; ++r)
        for (size_t i = 0; i < lines; i += 2) {
          first = _mm512_add_epi32(first, buffer[i]);
          second = _mm512_add_epi32(second, buffer[i + 1]);
        }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats);
    }
    // the sum is printed so that the reads are not optimised away
    std::printf("%6.0f MB: %5.1f GB/s (%d)\n", megabytes, megabytes * 1e6 / best / 1e9,
                _mm512_reduce_add_epi32(_mm512_add_epi32(first, second)) & 1);
    std::free(buffer);
  }
}
