// rayless: GRPO training for Slurm/MPI clusters. Dispatches to one subcommand; every error becomes
// one line "rayless: error: ..." and exit code 2 (bad input) or 1 (runtime failure).
#include <iostream>

#include "cli/commands.h"
#include "rayless/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const rayless::cli::Args&);
  const char* summary;
};

const Command kCommands[] = {
    {"train", rayless::cli::train, "train a policy with GRPO (run under mpirun or srun)"},
    {"generate", rayless::cli::generate, "sample a completion from a model directory"},
    {"inspect", rayless::cli::inspect, "summarise, print or export a rollout store"},
    {"config", rayless::cli::config, "check or show a config file"},
    {"bench", rayless::cli::bench, "micro-benchmarks (logprobs, threshold, model, rollouts)"},
    {"version", rayless::cli::version, "versions of rayless and its libraries"},
    {"init-model", rayless::cli::init_model, "seeded HF model directory from a config.json (benchmarks)"},
};

void usage(std::ostream& out) {
  out << "usage: rayless <command> [options]   (rayless <command> --help for details)\n\ncommands:\n";
  for (const Command& c : kCommands) out << "  " << c.name << std::string(12 - std::string(c.name).size(), ' ') << c.summary << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? rayless::kExitInput : rayless::kExitOk;
  }
  if (std::string(argv[1]) == "--version") argv[1] = const_cast<char*>("version");
  const std::string name = argv[1];
  rayless::cli::Args args(argv + 1, argv + argc);
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      rayless::print_error(e.what());
      return rayless::exit_code_for(e);
    }
  }
  rayless::print_error("unknown command \"" + name + "\" (try rayless --help)");
  return rayless::kExitInput;
}
