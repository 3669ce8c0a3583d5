// Batched generation: one prefill over the distinct prompts, then the KV cache is repeated for the
// G generations of each prompt and decoding proceeds one token per step for all rows still running.
#include "rayless/sampler/sampler.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <c10/core/InferenceMode.h>

#include "rayless/base/config.h"
#include "rayless/base/error.h"

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

namespace {

// The generator sampling uses on `device`: the given CPU one on the CPU; on CUDA a new CUDA generator
// seeded with the CPU one's seed, so a run's randomness still derives from (seed, rank, step, purpose).
torch::Generator generator_on(torch::Device device, torch::Generator& cpu_generator) {
  if (device.is_cpu()) return cpu_generator;
  torch::Generator on_device = at::detail::getCUDAHooks().getNewGenerator(device.index());
  on_device.set_current_seed(cpu_generator.current_seed());
  return on_device;
}

GenerationOutput sample_batch(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                              const SamplingParams& params, torch::Generator& generator, const Tokenizer* tokenizer) {
  inputCheck(!prompts.empty(), "generate: no prompts");
  inputCheck(params.num_generations >= 1, "generate: num_generations must be >= 1");
  inputCheck(params.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  inputCheck(params.stop_strings.empty() || tokenizer, "generate: stop strings need a tokenizer");
  for (const auto& p : prompts) inputCheck(!p.empty(), "generate: empty prompt (no tokens)");
  const bool was_training = model->is_training();
  model->eval();
  const auto device = model->device();
  const int64_t g = params.num_generations;
  const int64_t n = static_cast<int64_t>(prompts.size()) * g;
  const bool greedy = params.greedy || params.temperature == 0.0;

  auto [prompt_ids, prompt_mask] = left_pad(prompts, params.pad_id);
  const int64_t prompt_len = prompt_ids.size(1);
  std::optional<FusedGenerationWeights> fused;
  if (params.fused_weights) fused.emplace(model);
  KVCache cache;
  cache.capacity_hint = prompt_len + params.max_new_tokens;
  // prefill the distinct prompts once, then repeat cache and last hidden state per generation
  auto hidden = model->forward_hidden(prompt_ids.to(device), prompt_mask.to(device), {}, &cache);
  auto last_logits = model->logits(hidden.select(1, prompt_len - 1)).to(torch::kFloat32);
  auto rows = torch::arange(static_cast<int64_t>(prompts.size()), torch::kLong).repeat_interleave(g);
  if (g > 1) {
    cache.select_rows(rows);
    last_logits = last_logits.index_select(0, rows.to(device));
  }
  prompt_ids = prompt_ids.index_select(0, rows);
  prompt_mask = prompt_mask.index_select(0, rows);

  torch::Tensor eos = torch::tensor(params.eos_ids.empty() ? std::vector<int64_t>{-1} : params.eos_ids, torch::kLong);
  // The decode batch holds only rows that may still be running: `rows_in_batch` maps its rows to
  // output rows. Finished rows are dropped (cache, mask and ids compacted) once they are a quarter of
  // the batch, so short completions stop costing arithmetic without copying the cache at every EOS.
  auto rows_in_batch = torch::arange(n, torch::kLong);
  auto done_in_batch = torch::zeros({n}, torch::kBool);
  auto mask = prompt_mask.to(device);
  // the next token's position: the number of real tokens before it (what the mask's cumsum gives)
  auto next_position = prompt_mask.sum(1, /*keepdim=*/true).to(device);
  auto finished = torch::zeros({n}, torch::kBool);
  std::vector<torch::Tensor> tokens, token_mask, token_logprobs, token_entropies;
  std::vector<std::vector<int64_t>> completion_so_far(params.stop_strings.empty() ? 0 : n);
  torch::Tensor ids_so_far = params.repetition_penalty != 1.0 ? prompt_ids.clone() : torch::Tensor();

  // Logits stay on the model's device: processing, sampling and the per-token log-prob and entropy run
  // there, and only [rows] ids, log-probs and entropies cross to the host each step (on the CPU this is
  // the same arithmetic as ever). A CUDA run samples with a CUDA generator seeded like the CPU one.
  torch::Generator device_generator = generator_on(device, generator);
  if (ids_so_far.defined()) ids_so_far = ids_so_far.to(device);
  // A row whose logits are not all finite (a policy that diverged) cannot be sampled: it ends at that
  // step with the end token and is marked in out.nonfinite (the trainer's guard then leaves the step
  // out, nonfinite_guard.h); its logits are zeroed first so that sampling the others goes on.
  auto nonfinite = torch::zeros({n}, torch::kBool);
  const int64_t end_token = params.eos_ids.empty() ? params.pad_id : params.eos_ids.front();
  for (int64_t step = 0; step < params.max_new_tokens; ++step) {
    const torch::Tensor& scores = last_logits;
    const torch::Tensor bad_on_device = torch::isfinite(scores).all(-1).logical_not();
    auto processed = process_logits(scores.masked_fill(bad_on_device.unsqueeze(1), 0.0), ids_so_far, params);
    torch::Tensor sampled_on_device;
    if (greedy) {
      sampled_on_device = processed.argmax(-1);
    } else {
      sampled_on_device =
          torch::multinomial(processed.softmax(-1), 1, /*replacement=*/false, device_generator).squeeze(1);
    }
    torch::Tensor step_logprobs, step_entropies;
    if (params.return_logprobs) {
      auto base = greedy ? scores : scores / params.temperature;
      const auto log_probs = base.log_softmax(-1);
      step_logprobs = log_probs.gather(1, sampled_on_device.unsqueeze(1)).squeeze(1).cpu();
      step_entropies = (-(log_probs.exp() * log_probs).nan_to_num(0.0).sum(-1)).cpu();  // 0 * -inf counts 0
    }
    sampled_on_device = torch::where(bad_on_device, torch::full_like(sampled_on_device, end_token), sampled_on_device);
    torch::Tensor sampled = sampled_on_device.cpu();
    const auto running = done_in_batch.logical_not();
    const auto bad = bad_on_device.cpu() & running;
    sampled = torch::where(running, sampled, torch::full_like(sampled, params.pad_id));
    // back to all n output rows: rows no longer in the batch get padding and mask 0
    const auto alive = finished.logical_not();
    tokens.push_back(torch::full({n}, params.pad_id, torch::kLong).index_copy_(0, rows_in_batch, sampled));
    token_mask.push_back(alive.to(torch::kLong));
    if (params.return_logprobs) {
      auto lp = torch::where(running, step_logprobs, torch::zeros_like(step_logprobs));
      token_logprobs.push_back(torch::zeros({n}, lp.options()).index_copy_(0, rows_in_batch, lp));
      auto entropy = torch::where(running, step_entropies, torch::zeros_like(step_entropies));
      token_entropies.push_back(torch::zeros({n}, entropy.options()).index_copy_(0, rows_in_batch, entropy));
    }
    auto hit_eos = (torch::isin(sampled, eos) & running) | bad;
    nonfinite.index_fill_(0, rows_in_batch.masked_select(bad), true);
    if (!params.stop_strings.empty()) {
      auto sampled_a = sampled.accessor<int64_t, 1>();
      auto running_a = running.accessor<bool, 1>();
      auto rows_a = rows_in_batch.accessor<int64_t, 1>();
      for (int64_t i = 0; i < sampled.size(0); ++i) {
        if (!running_a[i]) continue;
        auto& so_far = completion_so_far[static_cast<size_t>(rows_a[i])];
        so_far.push_back(sampled_a[i]);
        const std::string text = tokenizer->decode(so_far, false);
        for (const auto& stop : params.stop_strings)
          if (!stop.empty() && text.find(stop) != std::string::npos) hit_eos[i] = true;
      }
    }
    done_in_batch = done_in_batch | hit_eos;
    finished.index_fill_(0, rows_in_batch.masked_select(hit_eos), true);
    if (ids_so_far.defined()) ids_so_far = torch::cat({ids_so_far, sampled.unsqueeze(1).to(device)}, 1);
    const int64_t num_done = done_in_batch.sum().item<int64_t>();  // one host sync per step
    if (num_done == done_in_batch.size(0) || step + 1 == params.max_new_tokens) break;
    if (4 * num_done >= done_in_batch.size(0)) {
      const auto keep = done_in_batch.logical_not().nonzero().squeeze(1);
      cache.select_rows(keep);
      mask = mask.index_select(0, keep.to(device));
      next_position = next_position.index_select(0, keep.to(device));
      rows_in_batch = rows_in_batch.index_select(0, keep);
      sampled = sampled.index_select(0, keep);
      done_in_batch = done_in_batch.index_select(0, keep);
      if (ids_so_far.defined()) ids_so_far = ids_so_far.index_select(0, keep.to(device));
    }
    mask = torch::cat({mask, torch::ones({mask.size(0), 1}, mask.options())}, 1);
    hidden = model->forward_hidden(sampled.unsqueeze(1).to(device), mask, next_position, &cache);
    next_position = next_position + 1;
    last_logits = model->logits(hidden.select(1, 0)).to(torch::kFloat32);
  }

  GenerationOutput out;
  out.prompt_ids = prompt_ids;
  out.prompt_mask = prompt_mask;
  if (tokens.empty()) {
    out.completion_ids = torch::zeros({n, 0}, torch::kLong);
    out.completion_mask = torch::zeros({n, 0}, torch::kLong);
    if (params.return_logprobs) out.logprobs = out.entropies = torch::zeros({n, 0}, torch::kFloat32);
  } else {
    out.completion_ids = torch::stack(tokens, 1);
    out.completion_mask = torch::stack(token_mask, 1);
    if (params.return_logprobs) {
      out.logprobs = torch::stack(token_logprobs, 1).to(torch::kFloat32);
      out.entropies = torch::stack(token_entropies, 1).to(torch::kFloat32);
    }
  }
  out.truncated = finished.logical_not();
  out.nonfinite = nonfinite;
  if (was_training) model->train();
  return out;
}

}  // namespace

GenerationOutput generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const SamplingParams& params, torch::Generator& generator, const Tokenizer* tokenizer) {
  GenerationOutput out;
  {
    // no autograd bookkeeping on the many small ops of decoding; the results are cloned out of
    // inference mode so that training may save them for backward
    c10::InferenceMode inference;
    out = sample_batch(model, prompts, params, generator, tokenizer);
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
  return params;
}

}  // namespace rayless
