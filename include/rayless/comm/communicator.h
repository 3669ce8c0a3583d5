// The Communicator: how ranks meet. SPMD code calls the same collectives in the same order on every
// rank; backends implement them (MPI for CPU tensors and host metadata, NCCL for CUDA tensors in
// src/comm/nccl/). Every collective runs under the watchdog (see watchdog.h), so a rank that never
// arrives makes the job abort with a message naming the collective, step and rank, never hang.
#pragma once
#include <mpi.h>
#include <torch/types.h>

#include <functional>
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
  // input: size() x n elements on every rank (contiguous, 1-D); output: n elements, where rank r
  // receives the reduction over ranks of input[r*n, (r+1)*n). Sharded optimizers (ZeRO) use it so
  // that each rank keeps only its shard of the averaged gradient.
  virtual void reduce_scatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) = 0;
  virtual void barrier() = 0;
  // Collective over this communicator (MPI_Comm_split): the ranks passing the same color >= 0 form a
  // new communicator of this backend, ordered by key (ties by rank here); a rank passing a negative
  // color takes part and gets nullptr. How roles get communicators of their own (asynchronous GRPO:
  // the training ranks, the generation ranks, the ranks weights travel between).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // dim 0 may differ between ranks (also 0): the counts are exchanged first (a small CPU tensor, so
  // host metadata travels by MPI under every backend), the data padded to the largest count, gathered
  // in one collective on its own device and the padding dropped by the known counts (never by
  // sentinel values) -> one tensor per rank. Written once for every backend.
  std::vector<torch::Tensor> allgather_variable(const torch::Tensor& tensor);

  // `tensor` where this backend's collectives take it: the host under MPI; where it is otherwise (NCCL
  // reduces CUDA tensors on the device and host tensors over MPI; one rank reduces nothing), so that a
  // value computed on the GPU is reduced there and read to the host later, with others, once.
  torch::Tensor in_collective_memory(const torch::Tensor& tensor) const;
};

class Runtime;

// Backends register here: the name that distributed.backend uses, whether it serves CUDA tensors,
// and how to make it. MPI is built in; the NCCL backend (src/comm/nccl/, compiled only when CUDA is
// on) registers itself when its object file is linked, so no factory code knows about it.
struct CommunicatorBackend {
  std::string name;
  bool serves_cuda = false;
  std::function<std::unique_ptr<Communicator>(Runtime&, torch::Device)> make;
  std::function<std::string()> library_version;  // for `rayless version`; may be empty
};
// Call from a static initializer (a `static const bool registered = ...` in the backend's file).
bool register_communicator_backend(CommunicatorBackend backend);
const CommunicatorBackend* find_communicator_backend(const std::string& name);  // nullptr when absent

// backend: "auto" (a registered CUDA backend for a CUDA device; else MPI with more than one rank,
// else the single-process backend), or a registered name ("mpi", "nccl"). The MPI backend takes CPU
// tensors of float32/64, bfloat16/float16 (reduced in float32, moved as bytes otherwise), int64,
// int32, int16, int8, uint8 and bool; the NCCL backend CUDA tensors. InputError for a backend that
// this build lacks or that cannot serve the device.
std::unique_ptr<Communicator> make_communicator(Runtime& runtime, const std::string& backend, torch::Device device);
// The built-in backends directly (tests, tools).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);  // duplicates comm
std::unique_ptr<Communicator> make_single_communicator();

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
