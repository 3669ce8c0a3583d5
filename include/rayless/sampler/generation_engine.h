// The generation engine behind generate() (sampler.h), shaped for GPUs and used on every device:
// - fixed decode slots: a KV cache preallocated for S slots ([layers][S, H_kv, max_len, D]), each slot
//   holding one sequence from position 0; positions, steps and finished flags are device tensors
//   updated in place, so a decode step runs the same operations every time;
// - continuous batching over a generation: every (prompt, generation) row is known in advance; when
//   rows finish, their slots take the next pending rows at the next refill (prefill in chunks across
//   the new arrivals, the G generations of a prompt sharing one prefill, its keys and values copied
//   into their slots); with nothing pending, the live slots are packed to the front so that a step
//   computes live rows only;
// - no host synchronisation per token: sampled ids, log-probs and entropies are written on the device
//   into [rows, tokens] buffers by the slot -> row map, EOS is checked on the device, and the host looks
//   at the finished flags every sync_interval steps; stop strings are checked then, on the host, and a
//   row is cut at the token that completed one (the tokens after it are discarded: a row's sampling
//   depends on nothing but its own history and its uniforms, sampling_stream.h).
// Dynamic RoPE (rope_scaling type "dynamic") sizes its frequencies for the longest position of the
// whole batch, as transformers' generate does: with it every row runs in one wave (slots = rows, one
// prefill), which reproduces transformers' state step by step.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rayless/sampler/sampler.h"

namespace rayless {

// What a slot costs and what memory there is for slots, for generation.slots = "auto".
struct SlotMemory {
  int64_t slot_bytes = 0;        // one slot's keys and values over every position, and its row of logits
  int64_t available_bytes = -1;  // -1: not known (then every row gets a slot)
  std::string source;            // where available_bytes comes from (available_memory.h)
};

// The settings one generation runs with, resolved from SamplingParams for a device and a batch.
struct EngineSettings {
  int64_t slots = 1;
  int64_t prefill_chunk = 0;  // 0 = every admitted prompt in one pass
  // Positions per prefill pass along the sequence: a chunk of prompts wider than this goes through the
  // model in pieces on the KV cache it fills (0 = one pass, as dynamic RoPE needs).
  int64_t prefill_positions = 0;
  int64_t sync_interval = 1;
  // The host reads a look one interval late: at each look it starts an asynchronous copy of the rows'
  // flags (into pinned memory on CUDA) and reads the previous look's, whose copy ran while the device
  // decoded, so the device never waits on the host. Rows end and slots refill one interval later; a
  // row at its token limit still has its look read at once. Off on the CPU, where a look costs nothing.
  bool lagged_look = false;
  std::string slots_reason;   // how the slot count was chosen, for the log line
};
// slots 0 -> auto_slots (memory); sync interval 0 -> 1 on the CPU (a look at the flags costs
// nothing there and refills sooner), 8 elsewhere; lagged_look "auto" -> on a CUDA device; prefill_positions = prefill_chunk, or
// kAutoPrefillPositions under auto; single_wave (dynamic RoPE) -> slots = rows and one prefill pass. Values below 0 (or a sync interval below 0) are InputErrors.
EngineSettings resolve_engine_settings(const SamplingParams& params, int64_t rows, const torch::Device& device,
                                       bool single_wave, const SlotMemory& memory = {});

// A prompt longer than this is prefilled in pieces of this many positions under generation.prefill_chunk
// = auto: its activations and attention masks then take memory as one piece's, not as the whole
// prompt's (masks grow with the square of the positions in one pass).
constexpr int64_t kAutoPrefillPositions = 2048;

// The share of the available memory that slots may take: the rest is for the prefill's activations, the
// step's temporaries and what the caching allocator keeps.
constexpr double kSlotMemoryShare = 0.5;
// generation.slots = "auto": as many slots as fit in kSlotMemoryShare of available_bytes at slot_bytes
// each, at least 1 and at most rows; every row when available_bytes < 0 (not known).
int64_t auto_slots(int64_t slot_bytes, int64_t available_bytes, int64_t rows);
// What one slot holds over `positions` (prompt + completion): keys and values in every layer, in
// cache_dtype, and a float32 row of logits.
int64_t slot_bytes(const ModelArchConfig& arch, torch::Dtype cache_dtype, int64_t positions);

// One generation (under inference mode; generate() wraps it).
GenerationOutput run_generation_engine(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                       const SamplingParams& params, const SamplingStream& stream,
                                       const Tokenizer* tokenizer, KeptKV* kept = nullptr);

}  // namespace rayless
