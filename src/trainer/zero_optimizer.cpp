// ZeRO stages 1 and 2: the layout, the sharded AdamW step, and checkpoints in stage 0's format.
#include "rayless/trainer/zero_optimizer.h"

#include <torch/serialize.h>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"
#include "rayless/ops/ops.h"
#include "rayless/trainer/torch_file.h"

namespace rayless {

ShardLayout::ShardLayout(const std::vector<torch::Tensor>& parameters, int world_size, int rank, int64_t bucket_elements)
    : world_size_(world_size), rank_(rank) {
  runtimeCheck(world_size >= 1 && rank >= 0 && rank < world_size && bucket_elements >= 1, "ShardLayout: rank ", rank,
               " of ", world_size, ", bucket of ", bucket_elements, " elements");
  std::vector<int64_t> starts;
  for (const auto& p : parameters) {
    starts.push_back(total_);
    total_ += p.numel();
  }
  size_t first = 0;  // the first parameter that can still overlap the next bucket
  for (int64_t begin = 0; begin < total_; begin += bucket_elements) {
    ShardBucket bucket;
    bucket.flat_begin = begin;
    bucket.length = std::min(bucket_elements, total_ - begin);
    bucket.slice = (bucket.length + world_size - 1) / world_size;
    const int64_t end = begin + bucket.length;
    const int64_t own_begin = std::min<int64_t>(static_cast<int64_t>(rank) * bucket.slice, bucket.length);
    const int64_t own_end = std::min<int64_t>(own_begin + bucket.slice, bucket.length);
    for (size_t i = first; i < parameters.size() && starts[i] < end; ++i) {
      const int64_t p_begin = starts[i], p_end = starts[i] + parameters[i].numel();
      if (p_end <= begin) {
        first = i + 1;
        continue;
      }
      ShardPiece piece;
      piece.parameter = i;
      piece.weight_decay = parameters[i].dim() >= 2;
      const int64_t from = std::max(begin, p_begin), to = std::min(end, p_end);
      piece.parameter_offset = from - p_begin;
      piece.bucket_offset = from - begin;
      piece.length = to - from;
      if (piece.length <= 0) continue;
      bucket.pieces.push_back(piece);
      // the part of this piece inside the rank's slice, with offsets relative to the slice
      const int64_t o_from = std::max(piece.bucket_offset, own_begin);
      const int64_t o_to = std::min(piece.bucket_offset + piece.length, own_end);
      if (o_to > o_from) {
        ShardPiece owned = piece;
        owned.parameter_offset = piece.parameter_offset + (o_from - piece.bucket_offset);
        owned.bucket_offset = o_from - own_begin;
        owned.length = o_to - o_from;
        bucket.owned.push_back(owned);
      }
    }
    buckets_.push_back(std::move(bucket));
  }
}

int64_t ShardLayout::shard_elements() const {
  int64_t n = 0;
  for (const auto& b : buckets_) n += b.slice;
  return n;
}

namespace {
torch::Tensor flat_view(const torch::Tensor& t) { return t.detach().view({-1}); }
int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }
}  // namespace

ZeroOptimizer::ZeroOptimizer(Communicator& comm, std::vector<torch::Tensor> parameters, const OptimConfig& config,
                             int64_t max_steps, int zero_stage, int64_t bucket_size_mb)
    : Optimizer(config, max_steps),
      comm_(comm),
      parameters_(std::move(parameters)),
      stage_(zero_stage),
      layout_([&] {
        inputCheck(!parameters_.empty(), "distributed.zero_stage = ", zero_stage, ": the model has no trainable parameters");
        for (const auto& p : parameters_)
          inputCheck(p.scalar_type() == parameters_[0].scalar_type() && p.device() == parameters_[0].device() &&
                         p.is_contiguous(),
                     "distributed.zero_stage = ", zero_stage,
                     " needs every trainable parameter contiguous, in one dtype and on one device");
        inputCheck(bucket_size_mb >= 0, "distributed.bucket_size_mb must be at least 0, got ", bucket_size_mb);
        const int64_t mb = bucket_size_mb > 0 ? bucket_size_mb : (comm.backend_name() == "nccl" ? 25 : 4);
        return ShardLayout(parameters_, comm.size(), comm.rank(),
                           std::max<int64_t>(1, mb * 1024 * 1024 / parameters_[0].element_size()));
      }()) {
  runtimeCheck(stage_ == 1 || stage_ == 2, "ZeroOptimizer: stage ", stage_);
  const size_t n = layout_.buckets().size();
  gradient_slices_.resize(n);
  exp_avg_.resize(n);
  exp_avg_sq_.resize(n);
}

torch::Tensor ZeroOptimizer::owned_values(const ShardBucket& bucket, const std::vector<torch::Tensor>& full) const {
  torch::Tensor out = torch::zeros({bucket.slice}, slice_options());
  for (const ShardPiece& piece : bucket.owned)
    out.narrow(0, piece.bucket_offset, piece.length)
        .copy_(flat_view(full[piece.parameter]).narrow(0, piece.parameter_offset, piece.length));
  return out;
}

void ZeroOptimizer::reduce_scatter_gradients() {
  torch::NoGradGuard no_grad;
  const auto start = std::chrono::steady_clock::now();
  const int world = layout_.world_size();
  const auto& buckets = layout_.buckets();
  for (size_t k = 0; k < buckets.size(); ++k) {
    const ShardBucket& bucket = buckets[k];
    torch::Tensor packed = torch::zeros({bucket.slice * world}, slice_options());
    for (const ShardPiece& piece : bucket.pieces) {
      const torch::Tensor& grad = parameters_[piece.parameter].grad();
      if (grad.defined())
        packed.narrow(0, piece.bucket_offset, piece.length)
            .copy_(grad.reshape({-1}).narrow(0, piece.parameter_offset, piece.length));
    }
    packed.div_(world);  // as DDP and stage 0: divide first, then sum
    torch::Tensor mine = torch::empty({bucket.slice}, packed.options());
    comm_.reduce_scatter(packed, mine, ReduceOp::Sum);
    if (gradient_slices_[k].defined())
      gradient_slices_[k].add_(mine);
    else
      gradient_slices_[k] = mine;
  }
  for (auto& p : parameters_) p.mutable_grad() = torch::Tensor();  // only the slices stay
  gradient_sync_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ZeroOptimizer::after_backward() {
  if (stage_ == 2) reduce_scatter_gradients();
}

torch::Tensor ZeroOptimizer::sum_of_squares() {
  // this rank's float64 sums added in bucket order, then over ranks, where the collectives take them
  torch::Tensor local = torch::zeros({}, slice_options().dtype(torch::kFloat64));
  for (const auto& g : gradient_slices_) local = local + ops::sum_of_squares(g);
  torch::Tensor global = comm_.in_collective_memory(local.reshape({1}));
  comm_.allreduce(global, ReduceOp::Sum);
  return global.reshape({});
}

torch::Tensor ZeroOptimizer::reduce_gradients() {
  torch::NoGradGuard no_grad;
  if (stage_ == 1) reduce_scatter_gradients();
  const auto& buckets = layout_.buckets();
  for (size_t k = 0; k < buckets.size(); ++k)
    if (!gradient_slices_[k].defined())
      gradient_slices_[k] = torch::zeros({buckets[k].slice}, slice_options());
  return sum_of_squares();  // global: every rank decides alike
}

void ZeroOptimizer::apply_gradients(int64_t step, double grad_norm, bool apply) {
  torch::NoGradGuard no_grad;
  if (!apply || !std::isfinite(grad_norm)) {  // the non-finite guard: nothing updated, the gradients dropped
    for (auto& slice : gradient_slices_) slice = torch::Tensor();
    return;
  }
  clip_by_norm(gradient_slices_, grad_norm, config_.max_grad_norm);
  const auto& buckets = layout_.buckets();

  // AdamW exactly as stage 0 computes it (adamw_update, element by element), on this rank's slices
  const double lr = scheduled_learning_rate(step);
  ++adam_steps_;
  for (size_t k = 0; k < buckets.size(); ++k) {
    const ShardBucket& bucket = buckets[k];
    torch::Tensor weights = owned_values(bucket, parameters_);
    if (config_.weight_decay != 0)
      for (const ShardPiece& piece : bucket.owned)
        if (piece.weight_decay) weights.narrow(0, piece.bucket_offset, piece.length).mul_(1 - lr * config_.weight_decay);
    if (!exp_avg_[k].defined()) {
      exp_avg_[k] = torch::zeros_like(weights);
      exp_avg_sq_[k] = torch::zeros_like(weights);
    }
    ops::AdamWHyper hyper;  // the decay is applied above, piece by piece
    hyper.lr = lr;
    hyper.beta1 = config_.adam_beta1;
    hyper.beta2 = config_.adam_beta2;
    hyper.eps = config_.adam_epsilon;
    hyper.step = adam_steps_;
    ops::adamw_update(weights, gradient_slices_[k].contiguous(), exp_avg_[k], exp_avg_sq_[k], hyper);
    // every rank's updated slice, back into the whole parameters
    const torch::Tensor gathered = comm_.allgather(weights).view({-1});
    for (const ShardPiece& piece : bucket.pieces)
      flat_view(parameters_[piece.parameter])
          .narrow(0, piece.parameter_offset, piece.length)
          .copy_(gathered.narrow(0, piece.bucket_offset, piece.length));
    gradient_slices_[k] = torch::Tensor();
  }
}

bool ZeroOptimizer::state_is_finite() const {
  for (size_t k = 0; k < exp_avg_.size(); ++k)
    if (exp_avg_[k].defined() &&
        (!torch::isfinite(exp_avg_[k]).all().item<bool>() || !torch::isfinite(exp_avg_sq_[k]).all().item<bool>()))
      return false;
  return true;
}

void ZeroOptimizer::collect_state() {
  torch::NoGradGuard no_grad;
  collected_exp_avg_.clear();
  collected_exp_avg_sq_.clear();
  if (adam_steps_ == 0) return;  // no step yet: no state, as torch's AdamW
  const bool keep = comm_.rank() == 0;
  if (keep)
    for (const auto& p : parameters_) {
      collected_exp_avg_.push_back(torch::zeros_like(p).detach());
      collected_exp_avg_sq_.push_back(torch::zeros_like(p).detach());
    }
  const auto& buckets = layout_.buckets();
  for (size_t k = 0; k < buckets.size(); ++k) {
    const torch::Tensor avg = comm_.allgather(exp_avg_[k]).view({-1});
    const torch::Tensor avg_sq = comm_.allgather(exp_avg_sq_[k]).view({-1});
    if (!keep) continue;
    for (const ShardPiece& piece : buckets[k].pieces) {
      collected_exp_avg_[piece.parameter].view({-1}).narrow(0, piece.parameter_offset, piece.length)
          .copy_(avg.narrow(0, piece.bucket_offset, piece.length));
      collected_exp_avg_sq_[piece.parameter].view({-1}).narrow(0, piece.parameter_offset, piece.length)
          .copy_(avg_sq.narrow(0, piece.bucket_offset, piece.length));
    }
  }
}

void ZeroOptimizer::write_state(const std::filesystem::path& path) {
  // stage 0's file: torch AdamW over the same parameters and groups, its state filled with whole moments
  auto adamw = make_grouped_adamw(parameters_, config_);
  for (size_t i = 0; i < collected_exp_avg_.size(); ++i) {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(adam_steps_);
    state->exp_avg(collected_exp_avg_[i]);
    state->exp_avg_sq(collected_exp_avg_sq_[i]);
    adamw->state()[parameters_[i].unsafeGetTensorImpl()] = std::move(state);
  }
  save_torch_file(*adamw, path);
  collected_exp_avg_.clear();
  collected_exp_avg_sq_.clear();
}

void ZeroOptimizer::load_state(const std::filesystem::path& path) {
  torch::NoGradGuard no_grad;
  auto adamw = make_grouped_adamw(parameters_, config_);
  torch::load(*adamw, path.string());
  std::vector<torch::Tensor> avg, avg_sq;
  adam_steps_ = 0;
  for (const auto& p : parameters_) {
    auto found = adamw->state().find(p.unsafeGetTensorImpl());
    if (found == adamw->state().end()) {
      avg.push_back(torch::zeros_like(p).detach());
      avg_sq.push_back(torch::zeros_like(p).detach());
      continue;
    }
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    avg.push_back(state.exp_avg());
    avg_sq.push_back(state.exp_avg_sq());
    adam_steps_ = std::max(adam_steps_, state.step());
  }
  const auto& buckets = layout_.buckets();
  for (size_t k = 0; k < buckets.size(); ++k) {
    exp_avg_[k] = adam_steps_ > 0 ? owned_values(buckets[k], avg) : torch::Tensor();
    exp_avg_sq_[k] = adam_steps_ > 0 ? owned_values(buckets[k], avg_sq) : torch::Tensor();
  }
}

std::vector<torch::Tensor> ZeroOptimizer::accumulated_gradients() {
  if (stage_ == 1) return parameter_gradients(parameters_);
  std::vector<torch::Tensor> out;
  const auto& buckets = layout_.buckets();
  for (size_t k = 0; k < buckets.size(); ++k)
    out.push_back(gradient_slices_[k].defined() ? gradient_slices_[k]
                                                : torch::zeros({buckets[k].slice}, slice_options()));
  return out;
}

void ZeroOptimizer::set_accumulated_gradients(const std::vector<torch::Tensor>& gradients) {
  if (stage_ == 1) return set_parameter_gradients(parameters_, gradients);
  const auto& buckets = layout_.buckets();
  inputCheck(gradients.size() == buckets.size(), "saved gradient slices: ", gradients.size(), " for ", buckets.size(),
             " buckets (saved with another distributed.bucket_size_mb?)");
  for (size_t k = 0; k < buckets.size(); ++k) {
    inputCheck(gradients[k].numel() == buckets[k].slice, "saved gradient slice ", k, " has ", gradients[k].numel(),
               " elements, this rank's slice ", buckets[k].slice);
    gradient_slices_[k] = gradients[k].to(slice_options()).reshape({-1}).clone();
  }
}

OptimizerMemory ZeroOptimizer::memory() const {
  OptimizerMemory m;
  for (const auto& p : parameters_) m.parameters += bytes_of(p);
  const int64_t slice_bytes = layout_.shard_elements() * parameters_[0].element_size();
  m.gradients = stage_ == 2 ? slice_bytes : m.parameters;  // stage 1 holds whole gradients until the step
  for (size_t k = 0; k < exp_avg_.size(); ++k) m.optimizer_state += bytes_of(exp_avg_[k]) + bytes_of(exp_avg_sq_[k]);
  return m;
}

}  // namespace rayless
