// Batched, KV-cached generation from left-padded prompts: each prompt sampled num_generations times
// in one pass (rows prompt0 x G, prompt1 x G, ...). Logit processing follows transformers' order:
// repetition penalty, temperature, top_k, top_p, min_p; greedy when temperature == 0 or greedy.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rayless/model/model.h"
#include "rayless/hf/tokenizer.h"

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
};


struct GenerationConfig;
// The [generation] keys as sampling parameters: temperature 0 = greedy; eos ids from the config,
// else the tokenizer's; the tokenizer's pad id. num_generations and return_logprobs stay default.
SamplingParams sampling_params_from_config(const GenerationConfig& config, const Tokenizer& tokenizer);

// Runs under no_grad and eval semantics; draws from `generator` (CPU generator) only, so a seed
// reproduces the output. tokenizer is needed only for stop strings.
GenerationOutput generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const SamplingParams& params, torch::Generator& generator,
                          const Tokenizer* tokenizer = nullptr);

// The logit processing alone, on float scores [N, V] with the ids so far [N, L] (for tests and the trainer).
torch::Tensor process_logits(const torch::Tensor& scores, const torch::Tensor& ids_so_far, const SamplingParams& params);

}  // namespace rayless
