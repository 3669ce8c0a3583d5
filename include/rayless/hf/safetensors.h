// Safetensors files (https://github.com/huggingface/safetensors format): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the raw data. The reader maps the
// file and checks every offset, size, dtype and shape before touching data, so a truncated or corrupt
// file is an InputError naming the file, never a crash.
#pragma once
#include <torch/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace rayless {

struct SafetensorsEntry {
  std::string dtype;           // "F32", "BF16", "F16"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

// The checked header of one file (no tensor data read).
std::map<std::string, SafetensorsEntry> read_safetensors_header(const std::filesystem::path& file);

// Every tensor of one file, copied out of the mapping (owned CPU tensors in the file's dtype).
std::map<std::string, torch::Tensor> load_safetensors(const std::filesystem::path& file);

// The weights of a model directory: model.safetensors, or the shards listed in
// model.safetensors.index.json. Returns an empty map when the directory holds neither.
std::map<std::string, torch::Tensor> load_safetensors_directory(const std::filesystem::path& dir);
bool has_safetensors(const std::filesystem::path& dir);

// Writes one file (tensors converted to contiguous CPU; F32, BF16 or F16), atomically.
void save_safetensors(const std::filesystem::path& file,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace rayless
