// Placeholder until the trainer lands: says so honestly instead of pretending.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int train(const Args& args) { throw RuntimeError("rayless train is not implemented in this build yet"); }

}  // namespace rayless::cli
