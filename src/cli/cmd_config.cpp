#include <iostream>

#include "cli/options.h"
#include "rayless/config.h"

namespace rayless::cli {

int config(const Args& args) {
  po::options_description options("rayless config check|show FILE [--set section.key=value ...]");
  std::string action, file;
  std::vector<std::string> overrides;
  options.add_options()("action", po::value(&action), "check | show")("file", po::value(&file), "config TOML")(
      "set", po::value(&overrides)->composing(), "override a key: section.key=value (repeatable)");
  po::positional_options_description positional;
  positional.add("action", 1).add("file", 1);
  po::variables_map vm;
  if (!parse_options(args, "rayless config check|show FILE [--set k=v ...]", options, vm, &positional)) return 0;
  inputCheck(action == "check" || action == "show", "config: expected \"check\" or \"show\", got \"", action, "\"");
  inputCheck(!file.empty(), "config ", action, ": missing FILE");
  const Config cfg = load_config(file, overrides);
  if (action == "show") {
    std::cout << config_to_toml(cfg);
  } else {
    std::cout << file << ": ok" << std::endl;
  }
  return 0;
}

}  // namespace rayless::cli
