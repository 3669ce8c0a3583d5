// Shared Boost.Program_options plumbing: parse, print --help, turn parser errors into InputErrors.
#pragma once
#include <boost/program_options.hpp>

#include <iostream>
#include <string>

#include "cli/commands.h"
#include "rayless/base/error.h"

namespace rayless::cli {

namespace po = boost::program_options;

// Parses args (args[0] is the subcommand). Returns false when --help was printed.
inline bool parse_options(const Args& args, const std::string& usage_line, po::options_description& options,
                          po::variables_map& vm, const po::positional_options_description* positional = nullptr) {
  options.add_options()("help,h", "show this help");
  try {
    std::vector<std::string> rest(args.begin() + 1, args.end());
    po::command_line_parser parser(rest);
    parser.options(options);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage_line << "\n\n" << options << std::endl;
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(str(args[0], ": ", e.what(), " (see rayless ", args[0], " --help)"));
  }
  return true;
}

}  // namespace rayless::cli
