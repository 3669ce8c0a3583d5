// rayless: GRPO training for Slurm/MPI clusters. Dispatches to one subcommand; every error becomes
// one line "rayless: error: ..." and exit code 2 (bad input) or 1 (runtime failure).
#include <cstdlib>

#include "cli/commands.h"
#include "cli/dispatch.h"

namespace {
// oneDNN (LibTorch's bfloat16 matmuls on CPUs) caches a compiled kernel per matmul shape, up to 1024
// of them, and packed lengths give new shapes every step: under train.bf16 peak RSS grew ~20 MB per
// step (53M model; +440 MB by step 24). 256 kernels hold every shape a step uses again (measured:
// step time within noise; 128 cost 3 % of training at 256 tokens), docs/benchmarks.md "oneDNN's
// kernel cache". A user's own setting wins.
void bound_onednn_kernel_cache() {
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr && std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr)
    setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256", 0);
}
}  // namespace

int main(int argc, char** argv) {
  using namespace rayless::cli;
  bound_onednn_kernel_cache();  // before LibTorch first calls oneDNN, which reads it once
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
