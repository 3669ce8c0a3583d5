// Placeholder until the logprobs benchmark lands.
#include "cli/commands.h"
#include "rayless/error.h"

namespace rayless::cli {

int bench_logprobs(const Args& args) { throw RuntimeError("rayless bench logprobs is not implemented in this build yet"); }

}  // namespace rayless::cli
