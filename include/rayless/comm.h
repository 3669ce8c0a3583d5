// The Communicator: how ranks meet. SPMD code calls the same collectives in the same order on every
// rank; backends implement them (MPI for CPU tensors and host metadata, NCCL for CUDA tensors in
// src/comm/nccl/). Every collective runs under the watchdog (see watchdog.h), so a rank that never
// arrives makes the job abort with a message naming the collective, step and rank, never hang.
#pragma once
#include <torch/types.h>

#include <memory>
#include <string>
#include <vector>

namespace rayless {

enum class ReduceOp { Sum, Max, Min };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;  // "mpi", "nccl", "single"

  // In place on every rank.
  virtual void allreduce(torch::Tensor& tensor, ReduceOp op) = 0;
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  // Same shape on every rank -> [size, ...shape] (rank r's tensor at index r).
  virtual torch::Tensor allgather(const torch::Tensor& tensor) = 0;
  // dim 0 may differ between ranks (also 0): counts are exchanged first, the data padded to the
  // largest count, gathered in one collective and the padding dropped -> one tensor per rank.
  virtual std::vector<torch::Tensor> allgather_variable(const torch::Tensor& tensor) = 0;
  virtual void barrier() = 0;
};

}  // namespace rayless
