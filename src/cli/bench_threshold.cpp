// Placeholder until the threshold benchmark lands.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int bench_threshold(const Args& args) { throw RuntimeError("rayless bench threshold is not implemented in this build yet"); }

}  // namespace rayless::cli
