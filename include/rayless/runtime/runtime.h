// The SPMD runtime of one process: MPI initialised once (MPI_THREAD_MULTIPLE requested, since the
// watchdog thread may abort while the main thread waits in a collective), rank/size, the node-local
// rank from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (right under mpirun and srun alike), the CUDA
// device for this rank (= local rank), intra-op threads, and a clean MPI_Finalize at the end.
// run_spmd() wraps a whole command so an exception on any rank ends every rank with one message.
#pragma once
#include "rayless/base/choices.h"
#include <mpi.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>

namespace rayless {

struct DistributedConfig;

class Runtime {
 public:
  // Initialises MPI unless it already is (then it neither initialises nor finalises: test mains).
  // argc/argv may be null. Sets the log rank (rayless/base/log.h) so rank-0 printing works at once.
  Runtime(int* argc = nullptr, char*** argv = nullptr);
  ~Runtime();  // stops the watchdog; MPI_Finalize if this object initialised MPI
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks on this node
  int local_size() const { return local_size_; }  // ranks on this node
  bool is_rank0() const { return rank_ == 0; }
  int thread_level() const { return thread_level_; }  // MPI_THREAD_* granted

  MPI_Comm world() const { return world_; }  // private duplicate of MPI_COMM_WORLD for data collectives
  MPI_Comm node() const { return node_; }    // ranks on this node
  MPI_Comm control() const { return control_; }  // separate duplicate for agreement on errors/signals

  // Collective: where the ranks run, e.g. "2 nodes (node1: ranks 0-1, node2: ranks 2-3)" (host names
  // from gethostname, ranks grouped in runs).
  std::string placement() const;

  // Threads: threads_per_rank > 0 as given, else max(1, hardware cores / local_size). Calls
  // torch::set_num_threads and returns the number chosen.
  int configure_threads(int64_t threads_per_rank);
  // "cpu" -> CPU; "cuda" -> cuda:local_rank (InputError when CUDA is absent or there are fewer
  // devices than local ranks); "auto" -> cuda:local_rank when CUDA is present, else CPU.
  torch::Device select_device(DeviceChoice requested) const;
  // Applies [distributed]: threads, watchdog deadline. Returns the thread count.
  int configure(const DistributedConfig& config);

 private:
  bool owns_mpi_ = false;
  int thread_level_ = 0;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  MPI_Comm world_ = MPI_COMM_NULL, node_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;
};

// Runs fn (the whole command) on every rank and turns its exceptions into one SPMD outcome:
//  - every rank reaches an agreement on the control communicator (an allreduce of the outcome),
//    whether fn returned or threw; when all ranks arrive, the lowest failing rank prints
//    "rayless: error: <message>" once and every rank returns the same code (2 when the failure is
//    an InputError, else 1; the maximum of fn's return codes otherwise): a clean exit everywhere;
//  - when a rank threw but the others do not arrive within grace_s (they wait in some collective),
//    that rank prints its message and calls MPI_Abort with its exit code, which ends all ranks.
// grace_s < 0: min(10 s, the watchdog's timeout).
int run_spmd(Runtime& runtime, const std::function<int()>& fn, double grace_s = -1);

}  // namespace rayless
