// Placeholder until the inspect command lands: says so honestly instead of pretending.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int inspect(const Args& args) { throw RuntimeError("rayless inspect is not implemented in this build yet"); }

}  // namespace rayless::cli
