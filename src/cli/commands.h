// Subcommands of the rayless executable. Each takes the arguments after its name (argv[0] is the
// subcommand's name) and returns the process exit code; errors are thrown (see rayless/error.h).
#pragma once
#include <string>
#include <vector>

namespace rayless::cli {

using Args = std::vector<std::string>;

int train(const Args& args);     // cmd_train.cpp
int config(const Args& args);    // cmd_config.cpp: check | show
int version(const Args& args);   // cmd_version.cpp
int generate(const Args& args);  // cmd_generate.cpp
int inspect(const Args& args);   // cmd_inspect.cpp
int bench(const Args& args);     // cmd_bench.cpp: dispatches to the bench_* below
int init_model(const Args& args);  // cmd_init_model.cpp: seeded HF model directory from a config.json

// rayless bench <name>: one file each
int bench_logprobs(const Args& args);   // bench_logprobs.cpp
int bench_threshold(const Args& args);  // bench_threshold.cpp (run under mpirun)
int bench_model(const Args& args);      // bench_model.cpp
int bench_rollouts(const Args& args);   // bench_rollouts.cpp

}  // namespace rayless::cli
