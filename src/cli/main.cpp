// rayless: GRPO training for Slurm/MPI clusters. Dispatches to one subcommand; every error becomes
// one line "rayless: error: ..." and exit code 2 (bad input) or 1 (runtime failure).
#include "cli/commands.h"
#include "cli/dispatch.h"
#include "cli/onednn_cache.h"
#include "rayless/runtime/crash_report.h"

int main(int argc, char** argv) {
  using namespace rayless::cli;
  bound_onednn_kernel_cache();  // first: before LibTorch calls oneDNN
  rayless::install_crash_report();  // before MPI_Init, which installs Open MPI's only where none is set
  if (argc >= 2 && std::string(argv[1]) == "--version") argv[1] = const_cast<char*>("version");
  return dispatch("rayless",
                  {{"train", train, "train a policy with GRPO (run under mpirun or srun)"},
                   {"generate", generate, "sample a completion from a model directory"},
                   {"tokenize", tokenize, "the prompt text and ids the trainer would feed the model"},
                   {"inspect", inspect, "summarise, print or export a rollout store"},
                   {"config", config, "check or show a config file"},
                   {"export", export_model, "write a LoRA adapter merged into its base as an HF model directory"},
                   {"version", version, "versions of rayless and its libraries"}},
                  argc, argv);
}
