// float32 products for generation's decode steps on CPUs with AVX2 and FMA but no AVX-512 (AMD before
// Zen 4, older Intel). There oneDNN's packed float32 kernel ran a decode product of 1-16 rows at 25-48
// GFLOP/s, and each call cost it tens of microseconds before any arithmetic, which is most of a small
// model's product; this kernel keeps 6 rows x 16 outputs of sums in registers and streams a weight laid
// out in the order it reads it (docs/benchmarks.md, "AVX2 products for the decode step"). On CPUs with
// AVX-512, oneDNN's kernel was as fast as a hand-written one (same page), so it stays there.
// Each output is one float32 sum over the inputs in order, plus the bias: the same bits whatever the
// thread count, within float32 summation-order rounding of oneDNN's and MKL's results.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rayless::avx2 {

// The CPU has AVX2 and FMA (the OS saving the 256-bit registers) and no AVX-512F, and the kernel is
// not switched off (set_enabled, or RAYLESS_AVX2=0 in the environment).
bool available();
// RAYLESS_AVX2=0 in the environment: rayless's AVX2 kernels (these products and the decode step's
// attention, decode_attention.h) are off, LibTorch's run instead.
bool switched_off_by_environment();
// For tests and measurements: use or ignore the kernel from now on (it is still only used where
// available() would be true otherwise).
void set_enabled(bool enabled);
// Which kernel generation's float32 products run on, and why (`rayless version` prints it).
std::string describe();

// Parts [out_i, in] float32 on the CPU (stacked in order, out = sum out_i) -> the kernel's layout
// (1-D float32): for each block of 16 outputs, for each input, the block's 16 weights; the last block
// is filled with zeros past `out`. The parts are read in place: a fused weight needs no concatenated
// copy first.
torch::Tensor pack(const std::vector<torch::Tensor>& parts);

// x [rows, in] float32 (contiguous), packed from pack() of parts of out rows in all, bias [out] float32
// or undefined -> [rows, out] float32: x w^T + bias.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& packed, int64_t out, const torch::Tensor& bias);

}  // namespace rayless::avx2
