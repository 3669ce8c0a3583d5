// Generation's silu(gate) * up in float32 on the CPU in one pass, for CPUs with AVX2 and FMA.
//
// While generating, the MLP's gate and up projections are one fused product (FusedDecodingWeights), and
// silu(gate) * up took two narrows, LibTorch's silu and a product: at a tiny-model decode step about
// 20 microseconds per layer, most of it LibTorch's exponential at 1.5 ns or more per float
// (docs/benchmarks.md, "The decode step's RMSNorm, silu and softmax in one pass"). Here each element
// is gate / (1 + e^-gate) * up, silu's own formula and rounding, with e^x from src/model/avx2_exp.h
// (within 2 ulp, where LibTorch's exp is within 1): results within a few float32 ulps of LibTorch's.
#pragma once
#include <torch/types.h>

#include <string>

namespace rayless {

// The CPU has AVX2 and FMA and the kernel is not switched off (set_decode_silu_times_enabled, or
// RAYLESS_AVX2=0 in the environment, which turns off every AVX2 kernel of rayless).
bool decode_silu_times_available();
// For tests and measurements: use or ignore the kernel from now on (where available otherwise).
void set_decode_silu_times_enabled(bool enabled);
// Which code generation's silu(gate) * up runs on, and why (`rayless version` prints it).
std::string describe_decode_silu_times();

// gate_up [..., 2 I] float32, contiguous, gate the first I of the last dimension and up the rest ->
// [..., I] float32: silu(gate) * up. Returns an undefined tensor where the kernel does not apply, and
// the caller runs LibTorch's silu and product: a kernel not available, another dtype or device, an odd
// last dimension, autocast lowering float32, or gradients wanted.
torch::Tensor decode_silu_times(const torch::Tensor& gate_up);

}  // namespace rayless
