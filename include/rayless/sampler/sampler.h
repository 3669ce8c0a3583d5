// KV-cached generation: each prompt sampled num_generations times (rows prompt0 x G, prompt1 x G, ...)
// by the generation engine (generation_engine.h: fixed decode slots, continuous batching). Logit
// processing follows transformers' order: repetition penalty, temperature, top_k, top_p, min_p; greedy
// when temperature == 0 or greedy. Sampling draws from a counter-based stream (sampling_stream.h), so
// a row's tokens depend on (stream key, global row) and its prompt, not on the batch it ran in.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rayless/model/model.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/sampler/kept_kv.h"
#include "rayless/sampler/sampling_stream.h"

namespace rayless {

struct SamplingParams {
  int64_t max_new_tokens = 64;
  int64_t num_generations = 1;
  double temperature = 1.0;
  int64_t top_k = 0;                // 0 = off
  double top_p = 1.0;               // 1 = off
  double min_p = 0.0;               // 0 = off
  double repetition_penalty = 1.0;  // 1 = off; penalises every id in the row so far, prompt included (HF)
  bool greedy = false;
  std::vector<int64_t> eos_ids;     // any of these ends a completion (included in the mask)
  std::vector<std::string> stop_strings;  // ends a completion after the token completing one (needs tokenizer)
  int64_t pad_id = 0;
  bool return_logprobs = false;
  bool fused_weights = true;        // decode on FusedGenerationWeights (one copy of the layer weights)
  // the engine (generation_engine.h)
  int64_t slots = 0;                // decode slots; 0 = auto (every row at once, as far as memory goes)
  int ranks_on_node = 1;            // ranks generating at once on this node, sharing its memory (auto slots on the CPU)
  int64_t prefill_chunk = 0;        // prompt tokens (rows x longest prompt) per prefill pass; 0 = auto
  int64_t sync_interval = 0;        // decode steps between the host's looks at finished rows; 0 = the device's default
  // per output row, fewer tokens than max_new_tokens (a row reaching its limit ends truncated); empty =
  // max_new_tokens for every row. The generation benchmark's long-tail workload; the trainer leaves it empty.
  std::vector<int64_t> row_max_new_tokens;
  // decode steps in the shapes CUDA graphs replay: the live slots rounded up to a power of two (idle
  // slots compute into the dummy row) attending to the whole cache length. Same rows; for tests of that path.
  bool fixed_shapes = false;
  std::string cuda_graphs = "auto";  // auto | on | off: the decode step as CUDA graphs (decode_graphs.h), CUDA only
  // auto | on | off: the host reads each look one interval late, from a copy of the flags (pinned
  // memory on CUDA) that ran while the device decoded on (generation_engine.h); auto = on a CUDA device
  std::string lagged_look = "auto";
};

// What the engine did in one generation (for the benchmark and the logs).
struct EngineStats {
  int64_t slots = 0;             // slots the engine ran with
  int64_t decode_steps = 0;      // decode steps (one forward of the live slots each)
  int64_t slot_steps = 0;        // sum over steps of the slots computed
  int64_t tokens = 0;            // completion tokens kept (the rows' lengths)
  int64_t host_syncs = 0;        // times the host read the device's finished flags
  int64_t prefills = 0;          // prefill passes
  int64_t prefill_tokens = 0;    // prompt tokens run through the model before decoding (kept ones not counted)
  double occupancy() const { return slot_steps > 0 ? double(tokens) / double(slot_steps) : 0.0; }
};

struct GenerationOutput {
  torch::Tensor prompt_ids;       // [N, P] left-padded (pad_id), rows repeated per generation
  torch::Tensor prompt_mask;      // [N, P] int64
  torch::Tensor completion_ids;   // [N, T] int64, pad_id after the end
  torch::Tensor completion_mask;  // [N, T] int64: 1 up to and including the first EOS / stop
  torch::Tensor truncated;        // [N] bool: no EOS (nor stop string) within max_new_tokens
  torch::Tensor logprobs;         // [N, T] float32 (if asked): log-softmax(logits / temperature) of the
                                  // chosen token (raw logits when greedy), 0 after the end
  torch::Tensor entropies;        // [N, T] float32 (with logprobs): entropy (nats) of that same
                                  // distribution, before top-k/top-p/min-p, as TRL computes it; 0 after the end
  torch::Tensor nonfinite;        // [N] bool: the row's logits held a NaN or an infinity at some step;
                                  // the row ended there with the first EOS id (pad when none)
  EngineStats stats;
};


struct GenerationConfig;
// The [generation] keys as sampling parameters: temperature 0 = greedy; eos ids from the config,
// else the tokenizer's; the tokenizer's pad id. num_generations and return_logprobs stay default.
SamplingParams sampling_params_from_config(const GenerationConfig& config, const Tokenizer& tokenizer);

// Runs under no_grad and eval semantics; output row i draws its uniforms from stream's global row
// stream.global_row(i), so a key reproduces the output. tokenizer is needed only for stop strings.
// With `kept`, rows that end leave their keys and values there (by global row), and rows whose
// prompt continues what the store holds for them start from those instead of a prefill (kept_kv.h).
GenerationOutput generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const SamplingParams& params, const SamplingStream& stream,
                          const Tokenizer* tokenizer = nullptr, KeptKV* kept = nullptr);

// The logit processing alone, on float scores [N, V] with the ids so far [N, L] (for tests and the trainer).
torch::Tensor process_logits(const torch::Tensor& scores, const torch::Tensor& ids_so_far, const SamplingParams& params);

}  // namespace rayless
