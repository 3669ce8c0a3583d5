// ZeRO stages 1 and 2 (distributed.zero_stage): AdamW whose moments, and at stage 2 the accumulated
// gradients, live on one rank each. See optimizer.h for the interface and docs/distributed.md for the
// layout and how stage 3 would extend it.
//
// Layout: the trainable parameters, in their fixed order, form one flat index space cut into buckets
// of bucket_size_mb. A bucket of L elements is split into N equal slices of c = ceil(L / N) elements
// (the last slices padded with zeros); rank r owns slice r of every bucket. One reduce-scatter per
// bucket leaves rank r with the averaged gradient of its slices; after AdamW on its slices, one
// all-gather per bucket returns every rank the updated bucket. Nothing is held whole: the packed
// bucket, the gathered bucket and the slice's weights exist one bucket at a time.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "rayless/trainer/optimizer.h"

namespace rayless {

class Communicator;

// A run of elements of one parameter inside a bucket.
struct ShardPiece {
  size_t parameter = 0;         // index into the parameter list
  int64_t parameter_offset = 0;  // first element, in the parameter's flattened order
  int64_t bucket_offset = 0;     // first element within the bucket (full pieces) or within the slice (owned)
  int64_t length = 0;
  bool weight_decay = false;  // transformers' grouping: tensors of 2+ dims decay
};

struct ShardBucket {
  int64_t flat_begin = 0;              // first element of the flat index space
  int64_t length = 0;                  // parameter elements in the bucket (L)
  int64_t slice = 0;                   // c = ceil(L / N): elements each rank owns (with padding)
  std::vector<ShardPiece> pieces;      // every parameter run in the bucket
  std::vector<ShardPiece> owned;       // the runs inside this rank's slice
};

class ShardLayout {
 public:
  ShardLayout(const std::vector<torch::Tensor>& parameters, int world_size, int rank, int64_t bucket_elements);
  const std::vector<ShardBucket>& buckets() const { return buckets_; }
  int64_t total_elements() const { return total_; }
  int64_t shard_elements() const;  // sum of the slices: what this rank keeps per state tensor
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

 private:
  std::vector<ShardBucket> buckets_;
  int64_t total_ = 0;
  int world_size_ = 1;
  int rank_ = 0;
};

class ZeroOptimizer final : public Optimizer {
 public:
  // parameters: all trainable tensors of one dtype and device, contiguous, the same order on every rank.
  ZeroOptimizer(Communicator& comm, std::vector<torch::Tensor> parameters, const OptimConfig& config,
                int64_t max_steps, int zero_stage, int64_t bucket_size_mb);

  void after_backward() override;
  torch::Tensor reduce_gradients() override;
  void apply_gradients(int64_t step, double grad_norm, bool apply) override;
  bool state_is_finite() const override;
  void collect_state() override;
  void write_state(const std::filesystem::path& path) override;
  void load_state(const std::filesystem::path& path) override;
  std::vector<torch::Tensor> accumulated_gradients() override;
  void set_accumulated_gradients(const std::vector<torch::Tensor>& gradients) override;
  OptimizerMemory memory() const override;
  int zero_stage() const override { return stage_; }
  const ShardLayout& layout() const { return layout_; }

 private:
  // every bucket: pack the parameters' .grad (zeros where undefined), divide by N, reduce-scatter,
  // add into this rank's gradient slices; then free the parameters' gradients
  void reduce_scatter_gradients();
  torch::Tensor owned_values(const ShardBucket& bucket, const std::vector<torch::Tensor>& full) const;
  torch::Tensor sum_of_squares();  // over all ranks' slices (collective), not read
  // flat slices, buckets and moments: the parameters' dtype and device, outside autograd
  torch::TensorOptions slice_options() const { return parameters_[0].options().requires_grad(false); }

  Communicator& comm_;
  std::vector<torch::Tensor> parameters_;
  int stage_;
  ShardLayout layout_;
  std::vector<torch::Tensor> gradient_slices_;  // per bucket [slice]; undefined between steps
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // per bucket [slice]
  int64_t adam_steps_ = 0;                        // AdamW's step count (the same for every parameter)
  std::vector<torch::Tensor> collected_exp_avg_, collected_exp_avg_sq_;  // rank 0, between collect and write
};

}  // namespace rayless
