#include "rayless/trainer/optimizer.h"

#include <torch/nn/utils/clip_grad.h>

#include <limits>

#include "rayless/base/config.h"
#include "rayless/trainer/lr_schedule.h"

namespace rayless {

Optimizer::Optimizer(torch::nn::Module& model, const OptimConfig& config, int64_t max_steps)
    : model_(model), config_(config), max_steps_(max_steps), warmup_steps_(warmup_steps_for(config, max_steps)) {
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options_for = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(config.learning_rate)
                                                            .betas({config.adam_beta1, config.adam_beta2})
                                                            .eps(config.adam_epsilon)
                                                            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options_for(config.weight_decay));
  groups.emplace_back(no_decay, options_for(0.0));
  adamw_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(config.learning_rate));
}

double Optimizer::step(int64_t step) {
  std::vector<torch::Tensor> parameters = model_.parameters();
  // transformers clips at infinity to measure the norm when it does not clip
  const double grad_norm = torch::nn::utils::clip_grad_norm_(
      parameters, config_.max_grad_norm > 0 ? config_.max_grad_norm : std::numeric_limits<double>::infinity());
  learning_rate_ = config_.learning_rate * lr_multiplier(config_.lr_scheduler_type, step, warmup_steps_, max_steps_);
  for (auto& group : adamw_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(learning_rate_);
  adamw_->step();
  adamw_->zero_grad(true);
  return grad_norm;
}

}  // namespace rayless
