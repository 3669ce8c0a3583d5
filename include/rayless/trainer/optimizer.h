// The optimizer side of a step, as transformers' Trainer does it for TRL: AdamW with transformers'
// grouping (no weight decay on 1-D tensors: biases and norm weights), the global gradient norm
// (clipped to optim.max_grad_norm when > 0, measured either way), and the learning-rate schedule,
// computed once per step.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <memory>

namespace rayless {

struct OptimConfig;

class Optimizer {
 public:
  Optimizer(torch::nn::Module& model, const OptimConfig& config, int64_t max_steps);
  // Optimizer step `step` (0-based): clip and measure the gradients, set the step's learning rate,
  // AdamW, zero the gradients. Returns the gradient norm before clipping.
  double step(int64_t step);
  double learning_rate() const { return learning_rate_; }  // of the last step (what transformers logs)
  torch::optim::AdamW& adamw() { return *adamw_; }         // its state goes into checkpoints

 private:
  torch::nn::Module& model_;
  const OptimConfig& config_;
  int64_t max_steps_;
  int64_t warmup_steps_;
  double learning_rate_ = 0;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace rayless
