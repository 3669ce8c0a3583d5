// rayless-bench: micro-benchmarks of rayless's pieces, and `init-model`, the seeded HF model
// directory two tools can start from bit-identically (tools/bench/compare.sh, the TRL fixtures).
// Kept out of the trainer binary. Errors print one line and exit 2 (bad input) or 1, as rayless.
#include "bench/benches.h"
#include "cli/dispatch.h"

int main(int argc, char** argv) {
  using namespace rayless::cli;
  return dispatch("rayless-bench",
                  {{"logprobs", bench_logprobs, "naive vs selective vs fused log-probs: peak memory and time"},
                   {"threshold", bench_threshold, "entropy threshold: gather vs select, bytes per rank and time (mpirun)"},
                   {"model", bench_model, "forward+backward and generation tokens/s, achieved FLOP/s"},
                   {"decode", bench_decode, "one KV-cached decode step at 1 and 32 rows vs weight streaming and matmul"},
                   {"generation", bench_generation, "the generation engine vs the old loop on long-tail lengths: tokens/s, steps, occupancy, syncs"},
                   {"products", bench_products, "generation's weight products per kernel (AMX tiles, oneDNN), weights from a pool"},
                   {"rollouts", bench_rollouts, "rollout tokens/s and rollout-store write/read time"},
                   {"zero-memory", bench_zero_memory, "parameters, gradients and AdamW state per rank at ZeRO stages 0/1/2"},
                   {"init-model", init_model, "seeded HF model directory from a config.json"}},
                  argc, argv);
}
