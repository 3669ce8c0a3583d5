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
  if (!parse_options(args, "rayless config check|show FILE [--set k=v ...] | rayless config reference", options, vm, &positional)) return 0;
  if (action == "reference") {  // the key table of docs/config.md, generated from the one table in code
    const Config defaults;
    std::string section;
    for (const ConfigField& f : config_fields()) {
      const std::string s = f.name.substr(0, f.name.find('.'));
      if (s != section) {
        std::cout << "\n## [" << s << "]\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
        section = s;
      }
      std::string doc = f.doc;
      for (size_t p = doc.find('|'); p != std::string::npos; p = doc.find('|', p + 2)) doc.replace(p, 1, "\\|");
      std::string allowed = f.allowed;
      for (size_t p = allowed.find('|'); p != std::string::npos; p = allowed.find('|', p + 2)) allowed.replace(p, 1, "\\|");
      std::cout << "| `" << f.name << "` | " << f.type << " | `" << f.show(defaults) << "` | " << allowed << " | " << doc << " |\n";
    }
    return 0;
  }
  inputCheck(action == "check" || action == "show", "config: expected \"check\", \"show\" or \"reference\", got \"", action, "\"");
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
