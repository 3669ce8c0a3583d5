// Logit processing, the [generation] keys as sampling parameters, and generate(): the engine
// (generation_engine.cpp) under inference mode.
#include "rayless/sampler/sampler.h"

#include <c10/core/InferenceMode.h>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/sampler/generation_engine.h"

namespace rayless {


torch::Tensor process_logits(const torch::Tensor& scores_in, const torch::Tensor& ids_so_far, const SamplingParams& params) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  auto scores = scores_in.to(torch::kFloat32).clone();
  if (params.repetition_penalty != 1.0 && ids_so_far.defined() && ids_so_far.numel() > 0) {
    // HF: every id already in the row (prompt and padding included) has its logit divided by the
    // penalty when positive and multiplied when negative
    auto index = ids_so_far.to(scores.device());
    auto picked = scores.gather(1, index);
    picked = torch::where(picked < 0, picked * params.repetition_penalty, picked / params.repetition_penalty);
    scores.scatter_(1, index, picked);
  }
  const bool greedy = params.greedy || params.temperature == 0.0;
  if (greedy) return scores;
  if (params.temperature != 1.0) scores = scores / params.temperature;
  const int64_t vocab = scores.size(-1);
  if (params.top_k > 0 && params.top_k < vocab) {
    auto kth = std::get<0>(scores.topk(params.top_k, -1)).narrow(-1, params.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (params.top_p < 1.0) {
    auto [sorted, order] = scores.sort(-1, /*descending=*/false);
    auto cumulative = sorted.softmax(-1).cumsum(-1);
    auto remove_sorted = cumulative <= (1.0 - params.top_p);
    remove_sorted.narrow(-1, vocab - 1, 1).fill_(false);  // keep at least one token
    auto remove = remove_sorted.scatter(1, order, remove_sorted);
    scores = scores.masked_fill(remove, neg_inf);
  }
  if (params.min_p > 0.0) {
    auto probs = scores.softmax(-1);
    auto threshold = probs.amax(-1, /*keepdim=*/true) * params.min_p;
    auto remove = probs < threshold;
    auto order = scores.argsort(/*stable=*/true, -1, /*descending=*/true);
    auto remove_sorted = remove.gather(1, order);
    remove_sorted.narrow(-1, 0, 1).fill_(false);  // the most likely token always stays
    remove = remove_sorted.scatter(1, order, remove_sorted);
    scores = scores.masked_fill(remove, neg_inf);
  }
  return scores;
}

GenerationOutput generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const SamplingParams& params, const SamplingStream& stream, const Tokenizer* tokenizer,
                          KeptKV* kept) {
  GenerationOutput out;
  {
    // no autograd bookkeeping on the many small ops of decoding; the results are cloned out of
    // inference mode so that training may save them for backward
    c10::InferenceMode inference;
    out = run_generation_engine(model, prompts, params, stream, tokenizer, kept);
  }
  for (torch::Tensor* t : {&out.prompt_ids, &out.prompt_mask, &out.completion_ids, &out.completion_mask, &out.truncated, &out.logprobs,
                          &out.entropies, &out.nonfinite})
    if (t->defined()) *t = t->clone();
  return out;
}

SamplingParams sampling_params_from_config(const GenerationConfig& config, const Tokenizer& tokenizer) {
  SamplingParams params;
  params.max_new_tokens = config.max_completion_length;
  params.temperature = config.temperature;
  params.greedy = config.temperature == 0.0;
  params.top_k = config.top_k;
  params.top_p = config.top_p;
  params.min_p = config.min_p;
  params.repetition_penalty = config.repetition_penalty;
  params.eos_ids = config.eos_token_ids.empty() ? tokenizer.eos_ids() : config.eos_token_ids;
  params.stop_strings = config.stop_strings;
  params.pad_id = tokenizer.pad_id();
  params.fused_weights = config.fused_weights;
  params.slots = config.slots;
  params.prefill_chunk = config.prefill_chunk;
  params.sync_interval = config.sync_interval;
  params.cuda_graphs = config.cuda_graphs;
  return params;
}

}  // namespace rayless
