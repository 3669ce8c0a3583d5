// Data-parallel training: every rank holds a full replica. At start the parameters (and buffers) are
// broadcast from rank 0; after backward, gradients are averaged across ranks in a few large flat
// buckets (distributed.bucket_size_mb), not one collective per tensor. Because every rank then
// applies the same optimizer step to the same gradients, replicas stay bit-identical.
//
// Scaling: like PyTorch DDP under TRL/accelerate, each bucket is divided by the world size and then
// summed, i.e. gradients are AVERAGED across processes. TRL's losses are written for that: dapo and
// cispo normalise by the global active-token count divided by num_processes, so the average of the
// per-rank gradients is the gradient of the global token mean; grpo/bnpo/dr_grpo are per-rank means
// that the average turns into a mean over ranks, exactly as in TRL.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rayless {

class Communicator;

class DataParallel {
 public:
  // parameters: the trainable tensors in a fixed order (the same on every rank); buffers (optional)
  // are only broadcast. bucket_size_mb: MiB per gradient bucket (a larger tensor is a bucket alone);
  // 0 picks by backend: 25 on NCCL (DDP's size), 4 elsewhere (Open MPI's shared-memory allreduce is
  // about twice as fast on 4 MiB pieces as on 25 MiB ones, docs/distributed.md).
  DataParallel(Communicator& comm, std::vector<torch::Tensor> parameters, int64_t bucket_size_mb,
               std::vector<torch::Tensor> buffers = {});
  DataParallel(Communicator& comm, torch::nn::Module& module, int64_t bucket_size_mb);

  // Rank 0's values to every rank (call once before training, and after loading a checkpoint on
  // rank 0 only).
  void broadcast_parameters(int root = 0);
  // Averages .grad of every parameter across ranks. A parameter without a gradient on this rank
  // gets a zero gradient first, so every rank reduces the same buckets.
  void allreduce_gradients();

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  int64_t gradient_collectives() const { return gradient_collectives_; }  // allreduces issued so far

  // FNV-1a over the bytes of all parameters (this rank's replica).
  uint64_t parameter_hash() const;
  // Collective: true on every rank when all ranks hold bit-identical parameters.
  bool replicas_identical();

 private:
  struct Bucket {
    std::vector<size_t> members;  // indices into parameters_
    int64_t numel = 0;
  };
  void build_buckets(int64_t bucket_bytes);
  static void broadcast_flat(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root);

  Communicator& comm_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> buffers_;
  std::vector<Bucket> buckets_;
  int64_t gradient_collectives_ = 0;
};

}  // namespace rayless
