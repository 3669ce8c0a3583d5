// libFuzzer target: model.safetensors.index.json of a sharded model directory (the weight_map naming
// shard files; one real shard is there), loaded as a model directory's weights.
#include <torch/types.h>

#include "fuzz_input.h"
#include "rayless/hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool shard_written = [] {
    rayless::save_safetensors(rayless::fuzz::work_dir() / "model" / "model-00001-of-00001.safetensors",
                              {{"model.embed_tokens.weight", torch::ones({4, 2})}, {"lm_head.weight", torch::zeros({4, 2})}});
    return true;
  }();
  (void)shard_written;
  rayless::fuzz::write_input("model/model.safetensors.index.json", data, size);
  return rayless::fuzz::parse_or_refuse([&] { rayless::load_safetensors_directory(rayless::fuzz::work_dir() / "model"); });
}
