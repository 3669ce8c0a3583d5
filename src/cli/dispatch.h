// One main for a program of subcommands (rayless, rayless-bench): usage on --help or no command,
// every error one line "rayless: error: ..." with exit 2 (bad input) or 1 (runtime failure).
#pragma once
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "rayless/base/error.h"
#include "rayless/base/failure_message.h"

namespace rayless::cli {

struct Command {
  const char* name;
  int (*run)(const Args&);
  const char* summary;
};

inline int dispatch(const std::string& program, const std::vector<Command>& commands, int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::ostream& out = argc < 2 ? std::cerr : std::cout;
    out << "usage: " << program << " <command> [options]   (" << program << " <command> --help for details)\n\ncommands:\n";
    for (const Command& c : commands) out << "  " << c.name << std::string(12 - std::string(c.name).size(), ' ') << c.summary << "\n";
    return argc < 2 ? kExitInput : kExitOk;
  }
  const std::string name = argv[1];
  const Args args(argv + 1, argv + argc);
  for (const Command& c : commands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const std::exception& e) {
      print_error(failure_message(e));
      return exit_code_for(e);
    }
  }
  print_error("unknown command \"" + name + "\" (try " + program + " --help)");
  return kExitInput;
}

}  // namespace rayless::cli
