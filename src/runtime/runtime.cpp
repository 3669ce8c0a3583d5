#include "rayless/runtime/runtime.h"

#include <torch/types.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <sched.h>
#include <unistd.h>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/base/failure_message.h"
#include "rayless/base/log.h"
#include "rayless/runtime/crash_report.h"
#include "rayless/runtime/watchdog.h"

namespace rayless {

Runtime::Runtime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_);
    runtimeCheck(rc == MPI_SUCCESS, "MPI_Init_thread failed with code ", rc);
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &world_);
  MPI_Comm_dup(MPI_COMM_WORLD, &control_);
  MPI_Comm_rank(world_, &rank_);
  MPI_Comm_size(world_, &size_);
  // ranks sharing memory = ranks on this node, whatever launched us (mpirun, srun --mpi=pmix)
  MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_);
  MPI_Comm_rank(node_, &local_rank_);
  MPI_Comm_size(node_, &local_size_);
  set_log_rank(rank_);
  set_crash_report_rank(rank_);
}

Runtime::~Runtime() {
  Watchdog::instance().stop();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* comm : {&node_, &control_, &world_})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  if (owns_mpi_) MPI_Finalize();
}

std::string Runtime::placement() const {
  char mine[256] = {};
  gethostname(mine, sizeof mine - 1);
  std::vector<char> all(256 * static_cast<size_t>(size_));
  MPI_Allgather(mine, 256, MPI_CHAR, all.data(), 256, MPI_CHAR, world_);
  // host -> its ranks as "a-b" runs, hosts in order of their lowest rank
  std::vector<std::pair<std::string, std::vector<int>>> hosts;
  for (int r = 0; r < size_; ++r) {
    const std::string host(&all[256 * static_cast<size_t>(r)]);
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == host; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {host, {}});
    it->second.push_back(r);
  }
  std::string out = std::to_string(hosts.size()) + (hosts.size() == 1 ? " node (" : " nodes (");
  for (size_t h = 0; h < hosts.size(); ++h) {
    const auto& ranks = hosts[h].second;
    out += (h ? ", " : "") + hosts[h].first + ": rank" + (ranks.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < ranks.size();) {
      size_t j = i;
      while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
      out += (i ? "," : "") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
      i = j + 1;
    }
  }
  return out + ")";
}

int Runtime::configure_threads(int64_t threads_per_rank) {
  int threads = static_cast<int>(threads_per_rank);
  if (threads <= 0) {
    // The cores this rank may run on: a rank that Slurm (--cpus-per-task) or mpirun (--bind-to) bound
    // gets exactly its own; an unbound one sees the whole node and takes its share of it.
    const int node_cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const int bound_cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0 ? CPU_COUNT(&allowed) : node_cores;
    threads = bound_cores < node_cores ? bound_cores : node_cores / std::max(1, local_size_);
    threads = std::max(1, threads);
  }
  torch::set_num_threads(threads);
  return threads;
}

torch::Device Runtime::select_device(DeviceChoice requested) const {
  if (requested == DeviceChoice::Cpu) return torch::kCPU;
  bool has_cuda = torch::cuda::is_available();
  if (requested == DeviceChoice::Auto && !has_cuda) return torch::kCPU;
  inputCheck(has_cuda, "model.device = \"cuda\" but this LibTorch build or machine has no CUDA device");
  int devices = static_cast<int>(torch::cuda::device_count());
  inputCheck(local_rank_ < devices, "rank ", rank_, " is local rank ", local_rank_, " on its node but only ", devices,
             " CUDA devices are visible: start at most one rank per GPU");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank_));
}

int Runtime::configure(const DistributedConfig& config) {
  Watchdog::instance().start(config.collective_timeout_s, rank_);
  return configure_threads(config.threads_per_rank);
}

namespace {
struct Outcome {
  int code = 0;
  std::string message;
  bool failed = false;
};
}  // namespace

int run_spmd(Runtime& runtime, const std::function<int()>& fn, double grace_s) {
  Outcome outcome;
  try {
    outcome.code = fn();
  } catch (const std::exception& e) {
    outcome = {exit_code_for(e), failure_message(e), true};
  } catch (...) {
    outcome = {kExitRuntime, "unknown exception", true};
  }
  if (grace_s < 0) {
    double timeout = Watchdog::instance().timeout_s();
    grace_s = timeout > 0 ? std::min(10.0, timeout) : 10.0;
  }
  const int size = runtime.size(), rank = runtime.rank();
  if (size == 1) {
    if (outcome.failed) print_error(outcome.message);
    return outcome.code;
  }
  // {worst code, size - lowest failing rank}: one MAX allreduce tells everyone the code and who prints.
  int local[2] = {outcome.code, outcome.failed ? size - rank : 0};
  int global[2] = {0, 0};
  MPI_Request request;
  MPI_Iallreduce(local, global, 2, MPI_INT, MPI_MAX, runtime.control(), &request);
  if (!outcome.failed) {
    // a rank that finished waits as in any collective: the watchdog ends it if a peer never comes
    CollectiveGuard guard("outcome agreement");
    MPI_Wait(&request, MPI_STATUS_IGNORE);
  } else {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    int done = 0;
    while (true) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        // the others wait in a collective this rank will never join: take the whole job down
        print_error(str("rank ", rank, ": ", outcome.message));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, outcome.code == 0 ? kExitRuntime : outcome.code);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (global[1] > 0 && size - global[1] == rank) print_error(outcome.message);
  return global[0];
}

}  // namespace rayless
