// Placeholder until the generate command lands: says so honestly instead of pretending.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int generate(const Args& args) { throw RuntimeError("rayless generate is not implemented in this build yet"); }

}  // namespace rayless::cli
