// libFuzzer target: a rayless TOML config file (TOML++ parse, every key's type and range, the
// cross-field rules).
#include "fuzz_input.h"
#include "rayless/base/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = rayless::fuzz::write_input("config.toml", data, size);
  return rayless::fuzz::parse_or_refuse([&] { rayless::load_config(file.string()); });
}
