// bfloat16 products on AMX tiles (amx_linear); see amx_kernels.h. The tile code carries its own target
// attribute, so the rest of the build needs no AMX flags; it runs only where the plan found the
// instructions and request_tile_permission() the kernel's permission.
#include "amx_kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "rayless/base/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RAYLESS_AMX_KERNEL 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace rayless::ops::amx {

namespace {
constexpr int64_t kOutputsPerBlock = 64;   // four tiles of 16 outputs side by side
constexpr int64_t kInputsPerChunk = 32;    // one tile row holds 16 input pairs
constexpr int64_t kChunkBytes = 4 * 1024;  // four 1 KiB weight tiles per 32 inputs of a block
constexpr int64_t kMaxTileRows = 16;
std::atomic<bool> granted{false};  // request_tile_permission() succeeded

#ifdef RAYLESS_AMX_KERNEL

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// tiles 0-3: the sums of four blocks of 16 outputs; 4: the inputs; 5-7: weights
__attribute__((target("amx-tile"))) void configure_tiles(int rows) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = t <= 4 ? static_cast<uint8_t>(rows) : 16;
  }
  // in assembly: GCC 12's _tile_loadconfig does not tell the optimiser that it reads the config,
  // which then dropped the stores that fill it (ldtilecfg faulted on an empty config)
  __asm__ volatile("ldtilecfg %0" : : "m"(config) : "memory");
}

__attribute__((target("amx-tile"))) void release_tiles() { _tile_release(); }

// sums[rows][64] (float32, row stride 64) = x[rows, chunks * 32] times one block's packed weight
__attribute__((target("amx-tile,amx-bf16"))) void multiply_block(const uint16_t* x, int64_t x_row_bytes,
                                                                 const char* weight, int64_t chunks, float* sums) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < chunks; ++c) {
    const char* tiles = weight + c * kChunkBytes;
    // 16 KiB ahead into L2: the best of 4-32 KiB ahead and of the L1, L2 and L3 hints, measured
    for (int line = 0; line < kChunkBytes; line += 64) _mm_prefetch(tiles + 4 * kChunkBytes + line, _MM_HINT_T1);
    _tile_loadd(4, x + c * kInputsPerChunk, x_row_bytes);
    _tile_loadd(5, tiles, 64);
    _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, tiles + 1024, 64);
    _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(7, tiles + 2048, 64);
    _tile_dpbf16ps(2, 4, 7);
    _tile_loadd(5, tiles + 3072, 64);
    _tile_dpbf16ps(3, 4, 5);
  }
  _tile_stored(0, sums, 256);
  _tile_stored(1, sums + 16, 256);
  _tile_stored(2, sums + 32, 256);
  _tile_stored(3, sums + 48, 256);
}

// bias[0..63] as float32 (zeros without a bias): a bfloat16 is a float32's top half
void widen_bias(const uint16_t* bias, float* widened) {
  for (int j = 0; j < kOutputsPerBlock; ++j) {
    const uint32_t bits = bias ? static_cast<uint32_t>(bias[j]) << 16 : 0;
    std::memcpy(&widened[j], &bits, 4);
  }
}

// out[r, 0..63] = bfloat16(sums[r] + bias), rounded to nearest even as oneDNN's conversion does
__attribute__((target("avx512f,avx512bf16"))) void round_block(const float* sums, int rows, const float* bias,
                                                               uint16_t* out, int64_t out_row) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < 4; ++j) {
      const __m512 value = _mm512_add_ps(_mm512_loadu_ps(sums + r * 64 + 16 * j), _mm512_loadu_ps(bias + 16 * j));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * out_row + 16 * j),
                          (__m256i)_mm512_cvtneps_pbh(value));
    }
}
#endif
}  // namespace

bool request_tile_permission() {
#ifdef RAYLESS_AMX_KERNEL
  static const bool permitted = [] {
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  granted.store(permitted);
  return permitted;
#else
  return false;
#endif
}

bool fits(int64_t out, int64_t in) {
  return out > 0 && in > 0 && out % kOutputsPerBlock == 0 && in % kInputsPerChunk == 0;
}

namespace {
template <typename T>
uint16_t bfloat16_bits(T value) {
  return c10::BFloat16(static_cast<float>(value)).x;  // round to nearest even, as a cast to bfloat16 does
}

// Writes the tile layout in order, reading each output's row through `rows` (parts of a fused weight
// need no concatenated copy first): per block, per 32-input chunk, four tiles of [16 pairs][16 outputs]
template <typename T>
void pack_rows(const std::vector<const T*>& rows, int64_t in, uint32_t* to) {
  const int64_t chunks = in / kInputsPerChunk, blocks = static_cast<int64_t>(rows.size()) / kOutputsPerBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t last) {
    for (int64_t block = first; block < last; ++block) {
      uint32_t* word = to + block * chunks * (kChunkBytes / 4);
      for (int64_t chunk = 0; chunk < chunks; ++chunk)
        for (int64_t tile = 0; tile < 4; ++tile)
          for (int64_t pair = 0; pair < 16; ++pair)
            for (int64_t o = 0; o < 16; ++o) {
              const T* from = rows[block * kOutputsPerBlock + tile * 16 + o] + chunk * kInputsPerChunk + 2 * pair;
              *word++ = bfloat16_bits(from[0]) | (static_cast<uint32_t>(bfloat16_bits(from[1])) << 16);
            }
    }
  });
}
}  // namespace

torch::Tensor pack(const std::vector<torch::Tensor>& parts) {
  runtimeCheck(!parts.empty(), "amx::pack: no weight");
  const auto dtype = parts.front().scalar_type();
  const int64_t in = parts.front().dim() == 2 ? parts.front().size(1) : -1;
  int64_t out = 0;
  for (const auto& part : parts) {
    runtimeCheck(part.dim() == 2 && part.size(1) == in && part.scalar_type() == dtype && part.device().is_cpu() &&
                     (dtype == torch::kBFloat16 || dtype == torch::kFloat32),
                 "amx::pack: expected [out_i, in] float32 or bfloat16 CPU weights, got ", part.sizes(), " ", part.scalar_type());
    out += part.size(0);
  }
  runtimeCheck(fits(out, in), "amx::pack: [", out, ", ", in, "] does not fit the tiles (out % 64, in % 32)");
  std::vector<torch::Tensor> contiguous;
  for (const auto& part : parts) contiguous.push_back(part.contiguous());
  auto packed = torch::empty({out * in}, parts.front().options().dtype(torch::kBFloat16));
  auto* to = reinterpret_cast<uint32_t*>(packed.data_ptr<at::BFloat16>());
  auto rows_of = [&](auto element) {
    using T = decltype(element);
    std::vector<const T*> rows;
    for (const auto& part : contiguous)
      for (int64_t n = 0; n < part.size(0); ++n) rows.push_back(part.data_ptr<T>() + n * in);
    pack_rows(rows, in, to);
  };
  if (dtype == torch::kFloat32)
    rows_of(float{});
  else
    rows_of(at::BFloat16{});
  return packed;
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out, const torch::Tensor& bias) {
  runtimeCheck(x.dim() == 2 && x.scalar_type() == torch::kBFloat16 && x.is_contiguous() &&
                   packed.scalar_type() == torch::kBFloat16 && packed.numel() == out * x.size(1) &&
                   fits(out, x.size(1)) && (!bias.defined() || (bias.numel() == out && bias.is_contiguous() &&
                                                                bias.scalar_type() == torch::kBFloat16)),
               "amx::linear: unexpected operands x ", x.sizes(), " ", x.scalar_type(), ", packed ", packed.numel(),
               ", out ", out);
  runtimeCheck(granted.load(), "amx::linear called before the tile state was granted");
  const int64_t rows = x.size(0), in = x.size(1);
  auto y = torch::empty({rows, out}, x.options());
  if (rows == 0) return y;
#ifdef RAYLESS_AMX_KERNEL
  const auto* input = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* weight = reinterpret_cast<const char*>(packed.data_ptr<at::BFloat16>());
  const auto* bias_bits = bias.defined() ? reinterpret_cast<const uint16_t*>(bias.data_ptr<at::BFloat16>()) : nullptr;
  auto* output = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
  const int64_t chunks = in / kInputsPerChunk, block_bytes = chunks * kChunkBytes;
  // blocks of outputs across threads; within a block, every 16 rows of x against the block's weight
  // (read from memory for the first 16 and from L2 after)
  at::parallel_for(0, out / kOutputsPerBlock, 1, [&](int64_t first, int64_t last) {
    alignas(64) float sums[kMaxTileRows * kOutputsPerBlock];
    alignas(64) float block_bias[kOutputsPerBlock];
    int configured = 0;
    for (int64_t block = first; block < last; ++block) {
      widen_bias(bias_bits ? bias_bits + block * kOutputsPerBlock : nullptr, block_bias);
      for (int64_t row = 0; row < rows; row += kMaxTileRows) {
        const int tile_rows = static_cast<int>(std::min(kMaxTileRows, rows - row));
        if (tile_rows != configured) configure_tiles(configured = tile_rows);
        multiply_block(input + row * in, in * 2, weight + block * block_bytes, chunks, sums);
        round_block(sums, tile_rows, block_bias, output + row * out + block * kOutputsPerBlock, out);
      }
    }
    if (configured) release_tiles();
  });
#endif
  return y;
}

}  // namespace rayless::ops::amx
