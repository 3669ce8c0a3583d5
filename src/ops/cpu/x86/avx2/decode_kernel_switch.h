// What the decode step's one-pass AVX2 kernels (decode_attention, decode_rms_norm, decode_silu_times)
// share: whether they can run on this CPU (AVX2 and FMA, RAYLESS_AVX2 not 0), each kernel's own switch
// for tests and measurements, and the line `rayless version` prints for it. Private to src/model.
#pragma once
#include <atomic>
#include <string>

#include "rayless/base/cpu_features.h"
#include "ops/cpu/x86/avx2/linear_rows.h"

namespace rayless {

class DecodeKernelSwitch {
 public:
  // `libtorch` names what runs instead, as `rayless version` prints it ("LibTorch's flash kernel")
  explicit DecodeKernelSwitch(const char* libtorch) : libtorch_(libtorch) {}

  // the CPU has the instructions and the environment does not turn rayless's AVX2 kernels off
  static bool usable() {
#ifdef RAYLESS_X86_KERNELS
    static const bool usable = !avx2::switched_off_by_environment() && cpu_has_avx2() && cpu_has_fma();
    return usable;
#else
    return false;
#endif
  }
  bool on() const { return usable() && enabled_.load(); }
  void set(bool enabled) { enabled_.store(enabled); }

  std::string describe() const {
    if (on()) return "AVX2 one-pass kernel (RAYLESS_AVX2=0 for " + libtorch_ + ")";
    if (avx2::switched_off_by_environment()) return libtorch_ + " (RAYLESS_AVX2=0)";
    if (usable()) return libtorch_ + " (switched off)";
    return libtorch_ + " (no AVX2 with FMA)";
  }

 private:
  const std::string libtorch_;
  std::atomic<bool> enabled_{true};
};

}  // namespace rayless
