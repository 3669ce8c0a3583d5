// Stage 0 (every rank holds everything), the pieces all stages share, and the factory.
#include "rayless/trainer/optimizer.h"

#include <ATen/Dispatch.h>
#include <torch/types.h>
#include <torch/serialize.h>

#include <chrono>
#include <cmath>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/ops/ops.h"
#include "rayless/trainer/data_parallel.h"
#include "rayless/trainer/lr_schedule.h"
#include "rayless/trainer/torch_file.h"
#include "rayless/trainer/zero_optimizer.h"

namespace rayless {

Optimizer::Optimizer(const OptimConfig& config, int64_t max_steps)
    : config_(config), max_steps_(max_steps), warmup_steps_(warmup_steps_for(config, max_steps)) {}

double Optimizer::scheduled_learning_rate(int64_t step) {
  learning_rate_ = config_.learning_rate * lr_multiplier(config_.lr_scheduler_type, step, warmup_steps_, max_steps_);
  return learning_rate_;
}

double Optimizer::step(int64_t step, bool apply) {
  const double grad_norm = std::sqrt(reduce_gradients().item<double>());
  apply_gradients(step, grad_norm, apply);
  return grad_norm;
}

double clip_coefficient(const torch::TensorOptions& gradients, double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  torch::NoGradGuard no_grad;
  const torch::Tensor total = torch::full({}, norm, torch::TensorOptions().dtype(gradients.dtype()));
  return torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0).item<double>();  // a host tensor
}

void clip_by_norm(const std::vector<torch::Tensor>& gradients, double norm, double max_norm) {
  if (max_norm <= 0 || gradients.empty()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor coefficient =
      torch::full({}, clip_coefficient(gradients[0].options(), norm, max_norm), gradients[0].options());
  for (const auto& g : gradients) g.detach().mul_(coefficient);
}

std::unique_ptr<torch::optim::AdamW> make_grouped_adamw(const std::vector<torch::Tensor>& parameters,
                                                        const OptimConfig& config) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : parameters) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto options_for = [&](double weight_decay) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(config.learning_rate)
                                                            .betas({config.adam_beta1, config.adam_beta2})
                                                            .eps(config.adam_epsilon)
                                                            .weight_decay(weight_decay));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, options_for(config.weight_decay));
  groups.emplace_back(no_decay, options_for(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(config.learning_rate));
}

namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

class ReplicatedOptimizer final : public Optimizer {
 public:
  ReplicatedOptimizer(std::vector<torch::Tensor> parameters, DataParallel& data_parallel, const OptimConfig& config,
                      int64_t max_steps)
      : Optimizer(config, max_steps), parameters_(std::move(parameters)), data_parallel_(data_parallel),
        adamw_(make_grouped_adamw(parameters_, config)) {}

  torch::Tensor reduce_gradients() override {
    const auto start = std::chrono::steady_clock::now();
    data_parallel_.allreduce_gradients();
    gradient_sync_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // float64 sums added in parameter order, on the gradients' device
    torch::Tensor squares;
    for (const auto& p : parameters_)
      if (p.grad().defined()) {
        const torch::Tensor s = ops::sum_of_squares(p.grad());
        squares = squares.defined() ? squares + s : s;
      }
    return squares.defined() ? squares : torch::zeros({}, torch::kFloat64);
  }

  void apply_gradients(int64_t step, double grad_norm, bool apply) override {
    if (!apply || !std::isfinite(grad_norm)) {  // the non-finite guard: nothing updated, the gradients dropped
      adamw_->zero_grad(true);
      return;
    }
    const torch::Tensor* first = nullptr;
    for (const auto& p : parameters_)
      if (!first && p.grad().defined()) first = &p.grad();
    // the clip is applied inside AdamW's pass (bit for bit clip_by_norm's product): one pass fewer
    const double grad_scale = first ? clip_coefficient(first->options(), grad_norm, config_.max_grad_norm) : 1.0;
    const double lr = scheduled_learning_rate(step);
    for (auto& group : adamw_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    single_pass_step(grad_scale);
    adamw_->zero_grad(true);
  }

  void write_state(const std::filesystem::path& path) override { save_torch_file(*adamw_, path); }
  void load_state(const std::filesystem::path& path) override { torch::load(*adamw_, path.string()); }

  std::vector<torch::Tensor> accumulated_gradients() override { return parameter_gradients(parameters_); }
  void set_accumulated_gradients(const std::vector<torch::Tensor>& gradients) override {
    set_parameter_gradients(parameters_, gradients);
  }

  OptimizerMemory memory() const override {
    OptimizerMemory m;
    for (const auto& p : parameters_) {
      m.parameters += bytes_of(p);
      m.gradients += bytes_of(p);  // every gradient is held from backward to the step
    }
    for (const auto& [key, state] : adamw_->state()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      m.optimizer_state += bytes_of(s.exp_avg()) + bytes_of(s.exp_avg_sq()) + bytes_of(s.max_exp_avg_sq());
    }
    return m;
  }
  int zero_stage() const override { return 0; }

  bool state_is_finite() const override {
    for (const auto& [key, state] : adamw_->state()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      if (!torch::isfinite(s.exp_avg()).all().item<bool>() || !torch::isfinite(s.exp_avg_sq()).all().item<bool>()) return false;
    }
    return true;
  }

 private:
  // torch::optim::AdamW's step, in one pass per tensor (ops::adamw_update), its state kept where
  // torch's AdamW keeps it, so checkpoints keep torch's format: parameters without a gradient are
  // skipped and get no state, as there.
  void single_pass_step(double grad_scale) {
    torch::NoGradGuard no_grad;
    for (auto& group : adamw_->param_groups()) {
      const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
      runtimeCheck(!options.amsgrad(), "AdamW: amsgrad is not supported");
      ops::AdamWHyper hyper;  // the group's; only the step count is per parameter
      hyper.lr = options.lr();
      hyper.beta1 = std::get<0>(options.betas());
      hyper.beta2 = std::get<1>(options.betas());
      hyper.eps = options.eps();
      hyper.weight_decay = options.weight_decay();
      hyper.grad_scale = grad_scale;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& slot = adamw_->state()[p.unsafeGetTensorImpl()];
        if (!slot) {
          auto state = std::make_unique<torch::optim::AdamWParamState>();
          state->step(0);
          state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          slot = std::move(state);
        }
        auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
        state.step(state.step() + 1);
        hyper.step = state.step();
        torch::Tensor param = p.detach(), exp_avg = state.exp_avg(), exp_avg_sq = state.exp_avg_sq();
        ops::adamw_update(param, p.grad(), exp_avg, exp_avg_sq, hyper);  // it checks contiguity itself
      }
    }
  }

  std::vector<torch::Tensor> parameters_;
  DataParallel& data_parallel_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace

std::vector<torch::Tensor> parameter_gradients(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  return grads;
}

void set_parameter_gradients(const std::vector<torch::Tensor>& parameters, const std::vector<torch::Tensor>& gradients) {
  inputCheck(gradients.size() == parameters.size(), "saved gradients: ", gradients.size(), " tensors for ",
             parameters.size(), " parameters");
  for (size_t i = 0; i < parameters.size(); ++i) {
    inputCheck(gradients[i].sizes() == parameters[i].sizes(), "saved gradients: tensor ", i, " has shape ",
               gradients[i].sizes(), ", the parameter ", parameters[i].sizes());
    torch::Tensor p = parameters[i];
    p.mutable_grad() = gradients[i].to(p.options()).clone();
  }
}

std::unique_ptr<Optimizer> make_optimizer(int zero_stage, Communicator& comm, std::vector<torch::Tensor> parameters,
                                          DataParallel& data_parallel, const OptimConfig& config, int64_t max_steps,
                                          int64_t bucket_size_mb) {
  if (zero_stage == 0)
    return std::make_unique<ReplicatedOptimizer>(std::move(parameters), data_parallel, config, max_steps);
  inputCheck(zero_stage == 1 || zero_stage == 2, "distributed.zero_stage = ", zero_stage,
             " is not implemented (0, 1 or 2; stage 3 would shard the parameters too)");
  return std::make_unique<ZeroOptimizer>(comm, std::move(parameters), config, max_steps, zero_stage, bucket_size_mb);
}

}  // namespace rayless
