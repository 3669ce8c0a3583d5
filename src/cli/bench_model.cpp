// Placeholder until the model benchmark lands.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int bench_model(const Args& args) { throw RuntimeError("rayless bench model is not implemented in this build yet"); }

}  // namespace rayless::cli
