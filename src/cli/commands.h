// Subcommands of the rayless executable. Each takes the arguments after its name (argv[0] is the
// subcommand's name) and returns the process exit code; errors are thrown (see rayless/base/error.h).
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
int tokenize(const Args& args);  // cmd_tokenize.cpp
int export_model(const Args& args);  // cmd_export.cpp: --merge a LoRA adapter into its base

}  // namespace rayless::cli
