// libFuzzer target: a .safetensors file (8-byte header length, JSON header, data), read the way a
// model load reads it: header checked, every tensor copied out.
#include "fuzz_input.h"
#include "rayless/hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = rayless::fuzz::write_input("model.safetensors", data, size);
  return rayless::fuzz::parse_or_refuse([&] {
    rayless::read_safetensors_header(file);
    rayless::load_safetensors(file);
  });
}
