// HF model directories: config.json + model.safetensors (or shards) + generation_config.json +
// tokenizer.json. What rayless writes, transformers loads (AutoModelForCausalLM.from_pretrained).
#pragma once
#include <torch/types.h>

#include <filesystem>
#include <string>

#include "rayless/model/model.h"
#include "rayless/hf/tokenizer.h"

namespace rayless {

// Builds the model from <dir>/config.json and loads its safetensors; with no weights in the directory
// it initialises from init_seed (std = initializer_range). Then converts to dtype and moves to device.
CausalLM load_hf_model(const std::filesystem::path& dir, torch::Dtype dtype = torch::kFloat32,
                       torch::Device device = torch::kCPU, uint64_t init_seed = 1234);

// Writes dir (which must not exist) atomically: config.json, model.safetensors, generation_config.json
// and, when tokenizer is given, tokenizer.json (+ tokenizer_config.json).
void save_hf_directory(const CausalLM& model, const Tokenizer* tokenizer, const std::filesystem::path& dir);
// Same into an existing or new directory, each file replaced atomically (checkpoints overwrite).
void write_hf_files(const CausalLM& model, const Tokenizer* tokenizer, const std::filesystem::path& dir);

}  // namespace rayless
