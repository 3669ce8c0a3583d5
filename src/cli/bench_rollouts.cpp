// Placeholder until the rollouts benchmark lands.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int bench_rollouts(const Args& args) { throw RuntimeError("rayless bench rollouts is not implemented in this build yet"); }

}  // namespace rayless::cli
