// libFuzzer target: a model's config.json (architecture, sizes, RoPE scaling, sliding windows).
#include "fuzz_input.h"
#include "rayless/model/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rayless::fuzz::write_input("model/config.json", data, size);
  return rayless::fuzz::parse_or_refuse([&] { rayless::load_model_config(rayless::fuzz::work_dir() / "model"); });
}
