// How the model's bfloat16 matrix products run on the CPU (train.bf16_products).
//
// Under train.bf16 the linear layers multiply bfloat16 operands. On CPUs with bfloat16 units
// (AVX512-BF16, AMX) oneDNN runs them there. Elsewhere LibTorch emulates them: each product of two
// bfloat16 values is exact in float32, the sums run in float32, the result is rounded once to
// bfloat16, at about an eighth of the float32 rate (9-10 against 72-81 GFLOP/s on an AMD EPYC with
// AVX2). `float32` products do the same arithmetic through the float32 kernels: the bfloat16 operands
// widened to float32 (exactly), a float32 product, one rounding to bfloat16. Only the order of the
// float32 sums differs, so an element is the emulation's or a neighbouring bfloat16 value.
#pragma once
#include <torch/types.h>

#include <string>

namespace rayless {

enum class BFloat16Products {
  bfloat16,  // LibTorch's own bfloat16 kernels, as autocast (and TRL) call them: the same bits
  float32,   // widened to float32, multiplied there, rounded once to bfloat16
};

// The process's setting: `bfloat16` until set_bfloat16_products (the trainer sets it at start).
BFloat16Products bfloat16_products();
void set_bfloat16_products(BFloat16Products how);

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

// train.bf16_products: "bfloat16", "float32", or "auto" (float32 where the CPU has no bfloat16
// units, cpu_has_bfloat16_units(), else bfloat16). Throws on any other value.
BFloat16Products bfloat16_products_for(const std::string& setting);
const char* to_string(BFloat16Products how);

// True when a product of these operands is widened: both bfloat16, on the CPU, and the setting is
// float32.
bool widens_bfloat16_product(const torch::Tensor& a, const torch::Tensor& b);

// a.mm(b) (2-dimensional operands), widened where widens_bfloat16_product says.
torch::Tensor bfloat16_aware_mm(const torch::Tensor& a, const torch::Tensor& b);
// torch::linear(x, weight, bias) (bias may be undefined), widened where widens_bfloat16_product(x,
// weight) says; the bias is then added in float32 before the one rounding, as addmm adds it.
torch::Tensor bfloat16_aware_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
// torch::linear(x, weight, bias) as it runs now: where bfloat16 autocast is on for a float32 weight
// on the CPU and the setting is float32, as autocast runs it (every operand cast to bfloat16) with the
// product widened; otherwise torch::linear itself, autocast included.
// Without gradients to the weight, its widened copy is kept until the next weight or until
// forget_widened_weight() (AutocastScope's end).
torch::Tensor linear_as_autocast(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
void forget_widened_weight();

}  // namespace rayless
