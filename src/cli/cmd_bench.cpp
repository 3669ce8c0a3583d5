#include <iostream>

#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int bench(const Args& args) {
  static const struct {
    const char* name;
    int (*run)(const Args&);
    const char* summary;
  } benches[] = {
      {"logprobs", bench_logprobs, "naive vs selective vs fused log-probs: peak memory and time"},
      {"threshold", bench_threshold, "entropy threshold: gather vs select, bytes per rank and time (mpirun)"},
      {"model", bench_model, "forward+backward and generation tokens/s, achieved FLOP/s"},
      {"rollouts", bench_rollouts, "rollout tokens/s and rollout-store write/read time"},
  };
  if (args.size() < 2 || args[1] == "--help" || args[1] == "-h") {
    std::cout << "usage: rayless bench <name> [options]\n\n";
    for (const auto& b : benches) std::cout << "  " << b.name << "\t" << b.summary << "\n";
    return args.size() < 2 ? kExitInput : kExitOk;
  }
  for (const auto& b : benches)
    if (args[1] == b.name) return b.run(Args(args.begin() + 1, args.end()));
  throw InputError(str("bench: unknown benchmark \"", args[1], "\" (try rayless bench --help)"));
}

}  // namespace rayless::cli
