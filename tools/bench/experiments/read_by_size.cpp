// Experiment (docs/notes/bench-xeon.md, "AMX tiles for the decode step's products" and "Training's backward
// ..."): how fast a core reads a buffer it reads over and over, by the buffer's size. Up to the
// last-level cache's share the reads come from that cache, beyond it from memory; a decode step reads
// its weights once per step, so which of the two it gets depends on whether the weights fit.
// With --two-readers MB: both cores read at once (a process pinned to each), from their own copies or
// from one shared copy, as two ranks' decoding weights would be with a node-shared copy.
// Not part of the build; needs AVX-512 and Linux.
//
//   g++ -O3 -march=native tools/bench/experiments/read_by_size.cpp -o /tmp/read_by_size
//   /tmp/read_by_size                                        # one core, 1 MB to 1600 MB
//   for mb in 54 107 200; do /tmp/read_by_size --two-readers $mb; done
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

double read_gbs(const __m512i* buffer, size_t lines, int repeats) {
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
  if (_mm512_reduce_add_epi32(_mm512_add_epi32(first, second)) == 1) std::puts("");  // keeps the reads
  return static_cast<double>(lines) * 64 / best / 1e9;
}

__m512i* filled(size_t bytes, bool shared_between_processes) {
  void* memory = shared_between_processes
                     ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                     : std::aligned_alloc(64, bytes);
  auto* lines = static_cast<__m512i*>(memory);
  for (size_t i = 0; i < bytes / 64; ++i) lines[i] = _mm512_set1_epi32(static_cast<int>(i));
  return lines;
}

}  // namespace

int two_readers(double megabytes) {
  const size_t bytes = static_cast<size_t>(megabytes * 1e6) / 128 * 128;
  const int repeats = std::max(1, static_cast<int>(3000 / megabytes));
  const char* modes[] = {"one reader", "two readers, own copies", "two readers, one shared copy"};
  for (int mode = 0; mode < 3; ++mode) {
    auto* ready = static_cast<std::atomic<int>*>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ready->store(0);
    const __m512i* shared = mode == 2 ? filled(bytes, true) : nullptr;
    const int readers = mode == 0 ? 1 : 2;
    for (int reader = 0; reader < readers; ++reader)
      if (fork() == 0) {
        cpu_set_t cores;
        CPU_ZERO(&cores);
        CPU_SET(reader, &cores);
        sched_setaffinity(0, sizeof cores, &cores);
        const __m512i* buffer = shared ? shared : filled(bytes, false);
        ready->fetch_add(1);
        while (ready->load() < readers) {
        }  // start together
        std::printf("%5.0f MB  %-30s reader %d: %5.1f GB/s\n", megabytes, modes[mode], reader,
                    read_gbs(buffer, bytes / 64, repeats));
        std::fflush(stdout);
        _exit(0);
      }
    for (int reader = 0; reader < readers; ++reader) wait(nullptr);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--two-readers") == 0) return two_readers(std::atof(argv[2]));
  for (const double megabytes : {1.0, 3.0, 16.0, 50.0, 107.0, 200.0, 400.0, 1600.0}) {
    const size_t bytes = static_cast<size_t>(megabytes * 1e6) / 128 * 128;
    const __m512i* buffer = filled(bytes, false);
    const int repeats = std::max(1, static_cast<int>(2000 / megabytes));
    std::printf("%6.0f MB: %5.1f GB/s\n", megabytes, read_gbs(buffer, bytes / 64, repeats));
    std::free(const_cast<__m512i*>(buffer));
  }
}
