// The Communicator: how ranks meet. SPMD code calls the same collectives in the same order on every
// rank; backends implement them (MPI for CPU tensors and host metadata, NCCL for CUDA tensors in
// src/comm/nccl/). Every collective runs under the watchdog (see watchdog.h), so a rank that never
// arrives makes the job abort with a message naming the collective, step and rank, never hang.
#pragma once
#include <mpi.h>
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

class Runtime;

// backend: "auto" (NCCL when the device is CUDA and the NCCL backend is built; else MPI with more
// than one rank, else the single-process backend), "mpi", "nccl", "single". The MPI backend takes
// CPU tensors of float32/64, bfloat16/float16 (reduced in float32, moved as bytes otherwise), int64,
// int32, int16, int8, uint8 and bool; the NCCL backend CUDA tensors. InputError for a backend that
// cannot serve the device (e.g. "nccl" without a CUDA build).
std::unique_ptr<Communicator> make_communicator(Runtime& runtime, const std::string& backend, torch::Device device);
// The backends directly (the factory above picks one of these).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);  // duplicates comm
std::unique_ptr<Communicator> make_single_communicator();
bool nccl_available();  // true when the NCCL backend is compiled in (RAYLESS_WITH_CUDA)

// Global reductions the trainer needs (collectives: every rank calls them alike).
double global_sum(Communicator& comm, double local);
int64_t global_sum(Communicator& comm, int64_t local);
double global_max(Communicator& comm, double local);
double global_min(Communicator& comm, double local);
torch::Tensor global_sum(Communicator& comm, const torch::Tensor& local);  // a reduced copy
struct MeanStd {
  double mean = 0;
  double std = 0;  // NaN when fewer than 2 values (unbiased) or none (as torch.std)
  int64_t count = 0;
};
// Mean and standard deviation of all elements on all ranks, in float64 (two allreduces: count and
// sum, then squared deviations from the global mean). unbiased = torch.std's default (TRL's
// rewards.std()). Equal to torch.std of the concatenation up to float64 rounding.
MeanStd global_mean_std(Communicator& comm, const torch::Tensor& local, bool unbiased = true);

}  // namespace rayless
