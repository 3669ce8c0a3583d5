// The optimizer side of a step, as transformers' Trainer does it for TRL: gradients averaged across
// ranks, AdamW with transformers' grouping (no weight decay on 1-D tensors: biases and norm weights),
// the global gradient norm (clipped to optim.max_grad_norm when > 0, measured either way), and the
// learning-rate schedule, computed once per step.
//
// Two implementations behind one interface, chosen by distributed.zero_stage:
//   0  ReplicatedOptimizer: every rank holds all gradients and AdamW moments (DataParallel's
//      allreduce, then torch::optim::AdamW).
//   1  ZeroOptimizer (zero_optimizer.h): each rank holds the AdamW moments of its 1/N shard only;
//      gradients are reduce-scattered at the step, the updated shards all-gathered.
//   2  as 1, and each micro-step's gradients are reduce-scattered right after backward, so between
//      micro-steps a rank holds only its shard of the accumulated gradient.
// All three give the same weights (float64: to rounding; tests/trainer/zero_stages_same_weights.sh)
// and write the same optimizer.pt (torch AdamW's format, whole moments), so a checkpoint resumes at
// any world size and any stage.
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

namespace rayless {

struct OptimConfig;
class Communicator;
class DataParallel;

// What this rank holds for training, in bytes (exact tensor accounting).
struct OptimizerMemory {
  int64_t parameters = 0;       // the policy's weights (every stage holds all of them)
  int64_t gradients = 0;        // gradients held between backward and the step
  int64_t optimizer_state = 0;  // AdamW moments
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // After each micro-step's backward (stage 2 reduce-scatters here and frees the full gradients).
  virtual void after_backward() {}
  // Optimizer step `step` (0-based, the schedule's count): average the gradients across ranks, clip and
  // measure them, set the step's learning rate, AdamW, zero the gradients. Collective. Returns the norm
  // before clipping. When `apply` is false or the norm is not finite (every rank sees the same norm)
  // nothing is updated: weights, AdamW moments, its step counts and the learning rate stay as they were;
  // the gradients are dropped (the non-finite guard, nonfinite_guard.h).
  // The trainer calls the two halves itself, so that the norm reaches the host in the step's one read
  // with its other values (step_read.h); step() is both with the norm read between them.
  double step(int64_t step, bool apply = true);
  // The first half: the gradients averaged across ranks (collective) and the global sum of their
  // squares, a float64 scalar where the collectives leave it (the device, or the host under MPI); no
  // read to the host.
  virtual torch::Tensor reduce_gradients() = 0;
  // The second half, with the norm (sqrt of that sum) read: clip, learning rate, AdamW, zero the
  // gradients; or, when `apply` is false or the norm is not finite, only drop the gradients.
  virtual void apply_gradients(int64_t step, double grad_norm, bool apply) = 0;
  // Whether the AdamW moments this rank holds are all finite (a checkpoint never holds a NaN).
  virtual bool state_is_finite() const = 0;
  double learning_rate() const { return learning_rate_; }  // of the last step (what transformers logs)
  // seconds spent averaging gradients across ranks since the last call (metrics: time/gradient_allreduce)
  double take_gradient_sync_seconds() { return std::exchange(gradient_sync_seconds_, 0.0); }

  // Checkpoints: collect_state() on every rank (collective: ZeRO gathers the moments to rank 0), then
  // write_state(path) on rank 0 writes torch AdamW's format with whole moments, whatever the stage.
  // load_state: every rank reads `path` and keeps what it owns (whole moments pass through memory).
  virtual void collect_state() {}
  virtual void write_state(const std::filesystem::path& path) = 0;
  virtual void load_state(const std::filesystem::path& path) = 0;
  // This rank's gradients accumulated since the last step (checkpoints between optimizer steps): the
  // parameters' .grad at stages 0 and 1, this rank's shards at stage 2.
  virtual std::vector<torch::Tensor> accumulated_gradients() = 0;
  virtual void set_accumulated_gradients(const std::vector<torch::Tensor>& gradients) = 0;

  virtual OptimizerMemory memory() const = 0;
  virtual int zero_stage() const = 0;

 protected:
  Optimizer(const OptimConfig& config, int64_t max_steps);
  // the step's learning rate from the schedule (also stored for learning_rate())
  double scheduled_learning_rate(int64_t step);

  const OptimConfig& config_;
  int64_t max_steps_;
  int64_t warmup_steps_;
  double learning_rate_ = 0;
  double gradient_sync_seconds_ = 0;
};

// torch AdamW over `parameters` with transformers' two groups (weight decay on tensors of 2+ dims).
// ZeRO builds one only to read and write checkpoints in the same format as stage 0.
std::unique_ptr<torch::optim::AdamW> make_grouped_adamw(const std::vector<torch::Tensor>& parameters,
                                                        const OptimConfig& config);

// Every parameter's gradient, zeros where backward left none (what a checkpoint between optimizer
// steps saves), and the reverse: p.grad = gradients[i], InputError when the counts or shapes differ.
std::vector<torch::Tensor> parameter_gradients(const std::vector<torch::Tensor>& parameters);
void set_parameter_gradients(const std::vector<torch::Tensor>& parameters, const std::vector<torch::Tensor>& gradients);

// The gradient norm as every stage measures it: squares summed in float64 whatever the gradients'
// dtype (torch's clip_grad_norm_ sums in the gradients' dtype), so a sum over shards and a sum over
// whole tensors agree to float64 rounding, and the clip coefficient, computed from it in the
// gradients' dtype as torch does, comes out the same at every stage: ZeRO then updates float32
// weights bit for bit as stage 0 does. Each tensor's squares: ops::sum_of_squares (ops/ops.h).
// min(1, max_norm / (norm + 1e-6)) computed in the gradients' dtype (torch's formula), or 1 when
// max_norm <= 0 (transformers then only measures the norm).
// Computed on the host (in the gradients' dtype), so it never waits for a device.
double clip_coefficient(const torch::TensorOptions& gradients, double norm, double max_norm);
// Multiplies every gradient by clip_coefficient in their dtype; nothing when max_norm <= 0. (Stage 0
// applies the coefficient inside AdamW's pass instead, AdamWHyper::grad_scale: the same products.)
void clip_by_norm(const std::vector<torch::Tensor>& gradients, double norm, double max_norm);

// The trainable `parameters` (every one, or LoRA's adapters), in a fixed order: stage 0 uses
// `data_parallel` (built over the same list) for the gradient allreduce; stages 1 and 2 their own
// reduce-scatter buckets of bucket_size_mb MiB.
std::unique_ptr<Optimizer> make_optimizer(int zero_stage, Communicator& comm, std::vector<torch::Tensor> parameters,
                                          DataParallel& data_parallel, const OptimConfig& config, int64_t max_steps,
                                          int64_t bucket_size_mb);

}  // namespace rayless
