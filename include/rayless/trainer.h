// `rayless train`: the GRPO loop of TRL's GRPOTrainer, SPMD over MPI ranks.
#pragma once
#include <string>
#include <vector>

namespace rayless {

class Runtime;

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string output_dir;              // --output (empty = train.output_dir)
  std::string resume;                  // --resume auto|PATH (empty = fresh start)
};

// Trains until train.max_steps or a stop signal. Returns 0 when done, kExitCheckpointedOnSignal after a
// signal checkpoint. Collective: every rank calls it with the same options.
int run_training(Runtime& runtime, const TrainOptions& options);

}  // namespace rayless
