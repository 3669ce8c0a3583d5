// The decoder's linear layers: torch.nn.Linear's state-dict names ("weight" [out, in], "bias") plus
// an optional LoRA adapter in PEFT's names ("lora_A.weight" [r, in], "lora_B.weight" [out, r]), so
// the HF state dict and PEFT's adapter files name the same tensors as transformers and PEFT do.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>

namespace rayless {

class ProjectionImpl : public torch::nn::Module {
 public:
  ProjectionImpl(int64_t in_features, int64_t out_features, bool bias);
  // x W^T + b, plus scaling * B(A(dropout(x))) when an adapter is present and active, computed as
  // PEFT's lora.Linear does: the adapter in its own dtype, the sum cast back to the base's dtype.
  // Dropout acts only in training mode with gradients enabled (the passes that train the adapter).
  torch::Tensor forward(const torch::Tensor& x);

  // Adds the adapter: A ~ U(-1/sqrt(in), 1/sqrt(in)) (PEFT's kaiming-uniform default) from `seed`,
  // B = 0, so the adapted layer starts equal to the base. dtype: the adapter's (PEFT upcasts
  // adapters of a 16-bit base to float32).
  void add_lora(int64_t r, double scaling, double dropout, torch::Dtype dtype, uint64_t seed);
  bool has_lora() const { return !lora_A.is_empty(); }
  torch::Tensor lora_delta() const;  // scaling * B @ A in the base's dtype, [out, in] (PEFT's merge)

  torch::Tensor weight, bias;  // bias undefined when the layer has none
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  double lora_scaling = 0.0;
  double lora_dropout = 0.0;
  bool lora_active = true;  // false: the base layer alone (the reference model of a LoRA run)
  int64_t in_features, out_features;
};
TORCH_MODULE(Projection);

}  // namespace rayless
