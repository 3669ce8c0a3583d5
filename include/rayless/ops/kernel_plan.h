// Which implementation each operation runs (ops.h), decided once per process: from what the CPU can do
// (base/cpu_features.h), the kernel switches in the environment and train.bf16_products. This is the
// one place that reads the switches; `rayless version` and the training start-up log print the plan,
// docs/kernels.md lists every entry and switch.
//
// A kernel is one of rayless's own implementations of an op (hand-written x86 loops, and the portable
// C++ / LibTorch compositions that replace LibTorch's default on the CPU). Each has a switch,
// RAYLESS_KERNEL_<NAME> (0: off, 1: on wherever the CPU can run it, even where the plan prefers
// another), and the x86 ones a switch for their instruction set as well: RAYLESS_AVX2=0,
// RAYLESS_AVX512=0, RAYLESS_AMX=0. Where a kernel is off, does not apply to the operands, or the
// device is not the CPU, the op runs its reference: LibTorch's operators, as before the kernel existed.
#pragma once
#include <string>
#include <vector>

namespace rayless::ops {

enum class Kernel {
  // portable: C++ and LibTorch calls, on any CPU
  autocast_linear,              // training's projections under autocast, the float32 weight kept for backward
  transpose_tiles,              // a 2-byte matrix transposed in cache-sized tiles (the weight gradients' operand)
  onednn_linear,                // generation's weights packed once for oneDNN's kernel
  attention_float32_backward,   // CPU flash attention with gradients: the bool mask kept; float32 backward (bfloat16)
  length_buckets,               // a packed pass's attention in buckets of rows of like length
  rms_norm_one_pass_backward,   // RMSNorm's backward as one node, two passes over each row (bfloat16 training)
  rotary_one_pass,              // the rotary embedding's forward and backward in one pass (bfloat16 training)
  decode_rotary,                // a decode step's q and k rotated in one pass, straight into the attention's dtype
  silu_times_down,              // silu(gate) * up recomputed in backward, not kept (training)
  silu_times_one_pass_backward, // silu(gate) * up's backward in one pass over bfloat16 rows
  adamw_single_pass,            // AdamW's update in one pass over memory
  sum_of_squares_single_pass,   // the gradient norm's sum of squares in one pass, eight float64 sums
  // portable, for a CUDA device: LibTorch compositions that reach its fused CUDA kernels
  folded_gqa_attention,         // grouped-query attention as one attention per key head
  fused_rms_norm,               // RMSNorm as LibTorch's _fused_rms_norm: one kernel forward, one backward
  joint_rotary,                 // a decode step's q and k rotated together, half by half: three kernels
  // x86 AVX2 (RAYLESS_AVX2=0 turns every one off)
  avx2_linear,                  // generation's float32 products, 6 rows x 16 outputs in registers
  avx2_decode_attention,        // a decode step's float32 attention in one pass
  avx2_decode_rms_norm,         // a decode step's float32 RMSNorm in one pass per row
  avx2_decode_silu_times,       // generation's float32 silu(gate) * up in one pass
  avx2_adamw,                   // adamw_single_pass's loop, 8 elements at a time
  avx2_sum_of_squares,          // sum_of_squares_single_pass's loop, 8 elements at a time
  // x86 AVX-512 (RAYLESS_AVX512=0)
  avx512_rms_norm_backward,     // rms_norm_one_pass_backward's rows, 16 at a time
  avx512_rotary_forward,        // rotary_one_pass's forward, 16 at a time
  avx512_rotary_backward,       // rotary_one_pass's backward, 16 at a time
  avx512_silu_times_backward,   // silu_times_one_pass_backward's rows, 16 at a time
  avx512_transpose,             // transpose_tiles' blocks of 32 x 16
  avx512_adamw,                 // adamw_single_pass's loop, 16 elements at a time
  avx512_sum_of_squares,        // sum_of_squares_single_pass's loop, 8 float64 lanes
  // x86 AMX (RAYLESS_AMX=0)
  amx_linear,                   // generation's bfloat16 products on AMX tiles
};
constexpr int kKernelCount = static_cast<int>(Kernel::amx_linear) + 1;

// How bfloat16 products run on the CPU under train.bf16 (train.bf16_products; ops.h, bfloat16_aware_mm).
enum class BFloat16Products {
  bfloat16,  // LibTorch's own bfloat16 kernels, as autocast (and TRL) call them: the same bits
  float32,   // widened to float32, multiplied there, rounded once to bfloat16
};

class KernelPlan {
 public:
  // Whether `kernel` runs where it applies (hot paths ask this per call: an atomic load).
  bool on(Kernel kernel) const;
  // Its name ("avx2_linear"), as the plan, its switch and docs/kernels.md spell it.
  static const char* name(Kernel kernel);
  // Its switch, RAYLESS_KERNEL_<NAME>.
  static std::string switch_name(Kernel kernel);

  BFloat16Products bfloat16_products() const;
  void set_bfloat16_products(BFloat16Products how);

  // One line per entry of the plan (an op, or one case of it): "<entry> <implementation> (<why>)".
  std::vector<std::string> describe() const;
  // The entries' names, in describe()'s order.
  static std::vector<std::string> entries();
};

// The process's plan, built on first use. A kernel switch with a value other than 0 or 1, or a
// RAYLESS_KERNEL_ variable that names no kernel, is an InputError naming it.
KernelPlan& kernel_plan();

// train.bf16_products: "bfloat16", "float32", or "auto" (float32 where the CPU has no bfloat16
// units, cpu_has_bfloat16_units(), else bfloat16). Throws on any other value.
BFloat16Products bfloat16_products_for(const std::string& setting);
const char* to_string(BFloat16Products how);
// The plan's setting: bfloat16 until set (the trainer sets it at start, for the CPU).
inline BFloat16Products bfloat16_products() { return kernel_plan().bfloat16_products(); }
inline void set_bfloat16_products(BFloat16Products how) { kernel_plan().set_bfloat16_products(how); }

// For tests and measurements: `kernel` on (wherever this CPU can run it and its switches in the
// environment do not turn it off, whatever the plan preferred) or off while alive, then as before.
class KernelOverride {
 public:
  KernelOverride(Kernel kernel, bool on);
  ~KernelOverride();
  KernelOverride(const KernelOverride&) = delete;
  KernelOverride& operator=(const KernelOverride&) = delete;

 private:
  Kernel kernel_;
  int previous_;
};

// The setting `how` while alive, then the previous one again (tests, tools).
class BFloat16ProductsScope {
 public:
  explicit BFloat16ProductsScope(BFloat16Products how) : previous_(bfloat16_products()) { set_bfloat16_products(how); }
  ~BFloat16ProductsScope() { set_bfloat16_products(previous_); }
  BFloat16ProductsScope(const BFloat16ProductsScope&) = delete;
  BFloat16ProductsScope& operator=(const BFloat16ProductsScope&) = delete;

 private:
  BFloat16Products previous_;
};

}  // namespace rayless::ops
