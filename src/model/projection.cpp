#include "rayless/model/projection.h"

#include "rayless/ops/ops.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cmath>

namespace rayless {

ProjectionImpl::ProjectionImpl(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  // torch.nn.Linear's init (kaiming-uniform weight, uniform bias); load or init_weights replace it
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", torch::empty({out, in}).uniform_(-bound, bound));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}).uniform_(-bound, bound));
}

torch::Tensor ProjectionImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = ops::linear(x, weight, bias);
  if (lora_A.is_empty() || !lora_active) return y;
  torch::Tensor adapter_input = x.to(lora_A->weight.scalar_type());
  if (lora_dropout > 0 && is_training() && torch::GradMode::is_enabled())
    adapter_input = torch::dropout(adapter_input, lora_dropout, true);
  return (y + lora_B(lora_A(adapter_input)) * lora_scaling).to(y.scalar_type());
}

void ProjectionImpl::add_lora(int64_t r, double scaling, double dropout, torch::Dtype dtype, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in_features, r).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(r, out_features).bias(false)));
  const auto options = torch::TensorOptions().dtype(dtype).device(weight.device());
  lora_A->weight.set_data(torch::empty({r, in_features}, torch::kFloat64).uniform_(-bound, bound, generator).to(options));
  lora_B->weight.set_data(torch::zeros({out_features, r}, options));
  lora_scaling = scaling;
  lora_dropout = dropout;
}

torch::Tensor ProjectionImpl::lora_delta() const {
  return (torch::matmul(lora_B->weight, lora_A->weight) * lora_scaling).to(weight.scalar_type());
}

}  // namespace rayless
