// rayless bench threshold (run under mpirun): the global entropy threshold by "gather" (counts,
// padded gather, selection) and by "select" (histogram allreduces on order-preserving keys), for a
// range of total token counts spread over the ranks. Reports the payload bytes each rank sends and
// receives, the slowest rank's time (median over repeats) and whether the two results are identical.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/comm/communicator.h"
#include "rayless/base/config.h"
#include "rayless/grpo/entropy_threshold.h"
#include "rayless/base/error.h"
#include "rayless/base/log.h"
#include "rayless/runtime/runtime.h"

namespace rayless::cli {

namespace {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

struct Measured {
  double seconds = 0;  // slowest rank, median over repeats
  int64_t bytes = 0;   // largest over ranks
  float threshold = 0;
};

Measured measure(Communicator& comm, const torch::Tensor& local, double top, EntropyThresholdMethod method, int repeats) {
  std::vector<double> times;
  Measured result;
  int64_t bytes = 0;
  for (int i = 0; i < repeats; ++i) {
    comm.barrier();
    auto start = std::chrono::steady_clock::now();
    const EntropyThreshold threshold = global_entropy_threshold(comm, local, top, method);
    result.threshold = threshold.value;
    bytes = threshold.bytes;
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    times.push_back(global_max(comm, elapsed));
  }
  std::sort(times.begin(), times.end());
  result.seconds = times[times.size() / 2];
  result.bytes = static_cast<int64_t>(global_max(comm, static_cast<double>(bytes)));
  return result;
}

}  // namespace

int bench_threshold(const Args& args) {
  po::options_description options("rayless-bench threshold (run under mpirun -n N)");
  std::vector<int64_t> totals;
  int repeats = 3;
  double top = 0.2;
  int64_t threads = 1;
  options.add_options()
      ("tokens", po::value(&totals)->multitoken(), "total token counts over all ranks (default 1e3 1e4 1e5 1e6 1e7)")
      ("repeats", po::value(&repeats)->default_value(3), "timed repeats per case (median reported)")
      ("top-entropy-quantile", po::value(&top)->default_value(0.2), "grpo.top_entropy_quantile")
      ("threads", po::value(&threads)->default_value(1), "intra-op threads per rank (0 = cores / ranks on the node)");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench threshold [--tokens N...] [--repeats R]", options, vm)) return 0;
  if (totals.empty()) totals = {1000, 10000, 100000, 1000000, 10000000};
  inputCheck(repeats >= 1, "bench threshold: --repeats must be at least 1");
  Runtime runtime;
  DistributedConfig distributed;
  distributed.threads_per_rank = threads;
  runtime.configure(distributed);
  return run_spmd(runtime, [&]() -> int {
    auto comm = make_communicator(runtime, "mpi", torch::kCPU);
    const int rank = comm->rank(), size = comm->size();
    std::ostringstream table;
    table << "| total tokens | ranks | gather: bytes/rank | gather: time | select: bytes/rank | select: time | identical |\n"
          << "| ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
    for (int64_t total : totals) {
      inputCheck(total >= 0, "bench threshold: --tokens must not be negative");
      // uneven on purpose: the first ranks take the remainder
      const int64_t mine = total / size + (rank < total % size ? 1 : 0);
      auto generator = at::make_generator<at::CPUGeneratorImpl>(12345 + rank);
      torch::Tensor local = torch::rand({mine}, generator) * 4;
      Measured gather = measure(*comm, local, top, EntropyThresholdMethod::Gather, repeats);
      Measured select = measure(*comm, local, top, EntropyThresholdMethod::Select, repeats);
      uint32_t a, b;
      std::memcpy(&a, &gather.threshold, 4);
      std::memcpy(&b, &select.threshold, 4);
      char g_time[32], s_time[32];
      std::snprintf(g_time, sizeof g_time, "%.2f ms", gather.seconds * 1e3);
      std::snprintf(s_time, sizeof s_time, "%.2f ms", select.seconds * 1e3);
      table << "| " << total << " | " << size << " | " << human_bytes(gather.bytes) << " | " << g_time << " | "
            << human_bytes(select.bytes) << " | " << s_time << " | " << (a == b ? "yes" : "NO") << " |\n";
      runtimeCheck(a == b, "bench threshold: gather and select disagree at ", total, " tokens");
    }
    log_info(table.str());
    return 0;
  });
}

}  // namespace rayless::cli
