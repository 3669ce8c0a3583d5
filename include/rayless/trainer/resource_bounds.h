// What a run asks of the model and the machine, checked before anything is loaded or written: the
// positions a sequence may reach against what the model is made for, and a lower bound of the memory
// a rank will hold (weights, gradients, AdamW moments, the KV cache of a generation, the activations
// of a training micro-batch) against the memory the rank has (runtime/available_memory.h).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "rayless/base/config.h"
#include "rayless/model/model.h"
#include "rayless/runtime/available_memory.h"

namespace rayless {

// The positions the model is made for, as vLLM derives a model's maximum length from config.json:
// max_position_embeddings, times the RoPE scaling factor for linear, dynamic and yarn scaling (yarn
// from original_max_position_embeddings when given); llama3's max_position_embeddings is already
// the scaled length.
int64_t position_limit(const ModelArchConfig& arch);

// rayless train, once the dataset is read: its longest prompt (after data.truncation, at most
// data.max_prompt_length tokens) + generation.max_completion_length beyond position_limit is an
// InputError naming both, the keys that bound them and `model_dir`'s config.json. The bound is the
// prompts the run has, not data.max_prompt_length: TRL trains a model on prompts shorter than that key.
void check_training_positions(const Config& config, const ModelArchConfig& arch, const std::string& model_dir,
                              int64_t longest_prompt);
// rayless config check, which reads no dataset: a completion that leaves no room for a prompt is an
// InputError; data.max_prompt_length + generation.max_completion_length beyond the limit returns a
// warning (prompts longer than what is left are refused at start), else "".
std::string check_configured_positions(const Config& config, const ModelArchConfig& arch, const std::string& model_dir);

struct MemoryEstimate {
  std::vector<std::pair<std::string, int64_t>> parts;  // what, bytes
  int64_t total() const;
  std::string describe() const;  // "KV cache 4.1 TiB, weights 8.4 MiB, ..." (largest first)
};

// A lower bound of what one rank of `rayless train` holds at its peak.
MemoryEstimate training_memory(const Config& config, const ModelArchConfig& arch, int64_t world_size);
// What one generation of `rows` sequences of up to `positions` tokens holds (weights included).
MemoryEstimate generation_memory(const ModelArchConfig& arch, torch::Dtype dtype, int64_t rows, int64_t positions);

// The phases of a run that allocate much, for MemoryPhase's bounds (failure_message.h).
enum class MemoryUse {
  Sampling,      // one generation: the KV cache of its rows
  LogprobPass,   // the old/reference log-prob pass over a generation's rows (no gradients)
  TrainingStep,  // one micro-step's forward and backward
};
// What `use` allocates and the settings that bound it, in one clause for an out-of-memory message:
// "32 rows x 76 positions, KV cache 1.2 MiB; bounded by train.per_device_train_batch_size = 4 x
// steps_per_generation 8, data.max_prompt_length 64 + generation.max_completion_length 12".
std::string memory_bounds(const Config& config, const ModelArchConfig& arch, int64_t world_size, MemoryUse use);

// InputError, one line, when `estimate` is above `available` (nothing when available is unknown).
void check_memory_fits(const MemoryEstimate& estimate, const AvailableMemory& available, const std::string& what,
                       const std::string& remedy);

}  // namespace rayless
