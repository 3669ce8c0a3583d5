// Fault scenarios for tests/comm/tests.cmake, run under mpiexec:
//   stall        rank 1 skips an allreduce: the watchdog on the other ranks must abort the job
//   throw-one    rank 1 throws a RuntimeError while the others wait in an allreduce: abort, one message
//   input-all    every rank throws the same InputError: clean exit 2 everywhere, one message
//   ok           every rank returns 0
// argv: mode [collective_timeout_s [grace_s]]
#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "rayless/comm/communicator.h"
#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/runtime/runtime.h"
#include "rayless/runtime/watchdog.h"

using namespace rayless;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  DistributedConfig config;
  config.collective_timeout_s = argc > 2 ? std::stod(argv[2]) : 3.0;
  config.threads_per_rank = 1;
  Runtime runtime(&argc, &argv);
  runtime.configure(config);
  auto comm = make_communicator(runtime, "mpi", torch::kCPU);
  set_watchdog_step(7);
  return run_spmd(runtime, [&]() -> int {
    torch::Tensor x = torch::ones({4});
    comm->allreduce(x, ReduceOp::Sum);  // everyone meets once
    if (mode == "stall") {
      if (comm->rank() != 1) comm->allreduce(x, ReduceOp::Sum);  // rank 1 never arrives
      // rank 1 idles: the job must end by the others' watchdog, not by rank 1 leaving
      if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
    } else if (mode == "throw-one") {
      if (comm->rank() == 1) throw RuntimeError("boom on rank 1");
      comm->allreduce(x, ReduceOp::Sum);
    } else if (mode == "input-all") {
      throw InputError("config.toml: bad key everyone sees");
    }
    return 0;
  }, argc > 3 ? std::stod(argv[3]) : 1.0);
}
