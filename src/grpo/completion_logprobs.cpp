// Completion log-probs: the padded pass (TRL's layout) and the packed pass that shares each prompt's
// keys/values among its generations and skips padding. See include/rayless/grpo/completion_logprobs.h.
#include "rayless/grpo/completion_logprobs.h"

#include <map>

#include "rayless/base/error.h"

namespace rayless {

namespace {

// Position ids for rows laid out left-padded to `width` columns whose padding starts at
// options.prompt_width - width: arange(width + extra) shifted; undefined without a prompt_width.
torch::Tensor shifted_positions(int64_t rows, int64_t width, int64_t extra, const CompletionLogprobOptions& options,
                                torch::Device device) {
  if (options.prompt_width <= 0) return {};
  runtimeCheck(options.prompt_width >= width, "completion_logprobs: prompt_width ", options.prompt_width,
               " is shorter than a prompt (", width, " tokens)");
  auto positions = torch::arange(options.prompt_width - width, options.prompt_width + extra,
                                 torch::TensorOptions().dtype(torch::kInt64));
  return positions.unsqueeze(0).expand({rows, width + extra}).contiguous().to(device);
}

ops::LogprobsAndEntropies padded_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                     const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                     const CompletionLogprobOptions& options) {
  const auto device = model->device();
  auto [prompt_ids, prompt_mask] = left_pad(prompts, options.pad_id);
  const auto input_ids = torch::cat({prompt_ids, completion_ids.cpu()}, 1).to(device);
  const auto attention_mask = torch::cat({prompt_mask, completion_mask.cpu().to(torch::kInt64)}, 1).to(device);
  const int64_t L = input_ids.size(1), T = completion_ids.size(1);
  const auto positions = shifted_positions(input_ids.size(0), prompt_ids.size(1), T, options, device);
  const auto hidden = model->forward_hidden(input_ids, attention_mask, positions);
  // position t predicts token t + 1: the completion tokens are predicted by positions P-1 .. L-2
  return ops::fused_logprobs(hidden.slice(1, L - T - 1, L - 1), model->lm_head_weight(), torch::Tensor(),
                        input_ids.slice(1, L - T, L), options.temperature, options.chunk_positions);
}

// Last scored completion position per row (-1 when none): positions 0 .. last-1 are the ones whose
// hidden states score tokens 1 .. last, so nothing after them needs computing.
std::vector<int64_t> last_scored_positions(const torch::Tensor& scored) {
  auto scored_a = scored.accessor<bool, 2>();
  std::vector<int64_t> last(static_cast<size_t>(scored.size(0)), -1);
  for (int64_t b = 0; b < scored.size(0); ++b)
    for (int64_t t = 0; t < scored.size(1); ++t)
      if (scored_a[b][t]) last[static_cast<size_t>(b)] = t;
  return last;
}

// The scored tokens' log-probs from packed hidden states: `source[i]` is the row of `hidden` whose
// state scores the i-th scored token (row-major over [B, T]); results scattered back to [B, T].
ops::LogprobsAndEntropies score_packed(CausalLM& model, const torch::Tensor& hidden, const std::vector<int64_t>& source,
                                  const std::vector<int64_t>& scored_flat, const torch::Tensor& completion_ids,
                                  const CompletionLogprobOptions& options) {
  const auto device = model->device();
  const auto long_cpu = torch::TensorOptions().dtype(torch::kInt64);
  const int64_t B = completion_ids.size(0), T = completion_ids.size(1);
  const auto scored_index = torch::tensor(scored_flat, long_cpu).to(device);
  const auto scoring = hidden.index_select(0, torch::tensor(source, long_cpu).to(device));
  const auto targets = completion_ids.reshape({-1}).to(device).index_select(0, scored_index);
  const auto result = ops::fused_logprobs(scoring.unsqueeze(0), model->lm_head_weight(), torch::Tensor(),
                                     targets.unsqueeze(0), options.temperature, options.chunk_positions);
  auto scatter = [&](const torch::Tensor& values) {
    return torch::zeros({B * T}, values.options()).index_copy(0, scored_index, values.squeeze(0)).view({B, T});
  };
  return {scatter(result.logps), scatter(result.entropies)};
}

// Without a cache (gradient checkpointing keeps none): the padded [B, P + T] layout, but only real
// prompt tokens and completion positions 0 .. last-1 are computed.
ops::LogprobsAndEntropies unpadded_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                       const torch::Tensor& completion_ids_in, const torch::Tensor& completion_mask_in,
                                       const CompletionLogprobOptions& options) {
  const auto device = model->device();
  const int64_t B = completion_ids_in.size(0), T = completion_ids_in.size(1);
  const auto completion_ids = completion_ids_in.cpu().contiguous();
  const auto scored = (completion_mask_in.cpu() != 0).contiguous();
  auto [prompt_ids, prompt_mask] = left_pad(prompts, options.pad_id);
  const int64_t P = prompt_ids.size(1), L = P + T;
  const std::vector<int64_t> last = last_scored_positions(scored);
  auto prompt_mask_a = prompt_mask.accessor<int64_t, 2>();
  auto scored_a = scored.accessor<bool, 2>();
  std::vector<int64_t> token_index, packed_position(static_cast<size_t>(B * L), -1), scored_flat, source;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < P + last[static_cast<size_t>(b)]; ++j) {
      if (j < P && !prompt_mask_a[b][j]) continue;
      packed_position[static_cast<size_t>(b * L + j)] = static_cast<int64_t>(token_index.size());
      token_index.push_back(b * L + j);
    }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      if (scored_a[b][t]) {
        scored_flat.push_back(b * T + t);
        source.push_back(packed_position[static_cast<size_t>(b * L + P - 1 + t)]);  // position P-1+t scores token t
      }
  if (scored_flat.empty()) return padded_logprobs(model, prompts, completion_ids_in, completion_mask_in, options);
  const auto input_ids = torch::cat({prompt_ids, completion_ids}, 1).to(device);
  const auto attention_mask = torch::cat({prompt_mask, scored.to(torch::kInt64)}, 1).to(device);
  const auto positions = shifted_positions(B, P, T, options, device);
  const auto hidden = model->forward_hidden(input_ids, attention_mask, positions, nullptr,
                                            torch::tensor(token_index, torch::TensorOptions().dtype(torch::kInt64)));
  return score_packed(model, hidden, source, scored_flat, completion_ids, options);
}

// The distinct prompts among the first B, in order of first use, and per row which one it continues.
std::pair<std::vector<std::vector<int64_t>>, torch::Tensor> distinct_prompts(const std::vector<std::vector<int64_t>>& prompts,
                                                                               int64_t B) {
  std::map<std::vector<int64_t>, int64_t> prompt_number;
  std::vector<std::vector<int64_t>> distinct;
  auto prompt_of_row = torch::empty({B}, torch::TensorOptions().dtype(torch::kInt64));
  for (int64_t b = 0; b < B; ++b) {
    auto [it, added] = prompt_number.emplace(prompts[static_cast<size_t>(b)], static_cast<int64_t>(distinct.size()));
    if (added) distinct.push_back(it->first);
    prompt_of_row[b] = it->second;
  }
  return {distinct, prompt_of_row};
}

ops::LogprobsAndEntropies packed_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                     const torch::Tensor& completion_ids_in, const torch::Tensor& completion_mask_in,
                                     const CompletionLogprobOptions& options) {
  const auto device = model->device();
  const auto long_cpu = torch::TensorOptions().dtype(torch::kInt64);
  const int64_t B = completion_ids_in.size(0), T = completion_ids_in.size(1);
  const auto completion_ids = completion_ids_in.cpu().contiguous();
  const auto scored = (completion_mask_in.cpu() != 0).contiguous();

  // the distinct prompts and, per row, which one it continues
  const auto [distinct, prompt_of_row] = distinct_prompts(prompts, B);
  auto [prompt_ids, prompt_mask] = left_pad(distinct, options.pad_id);

  // Which hidden state scores which token. Packed prompt tokens are numbered in row-major order, so
  // prompt u's last token (always real: prompts are left-padded) is the cumulative count minus one.
  const auto prompt_index = prompt_mask.reshape({-1}).nonzero().squeeze(1);
  const auto last_prompt_token = prompt_mask.sum(1).cumsum(0) - 1;  // [U]
  auto scored_a = scored.accessor<bool, 2>();
  auto prompt_of_row_a = prompt_of_row.accessor<int64_t, 1>();
  auto last_prompt_a = last_prompt_token.accessor<int64_t, 1>();
  const std::vector<int64_t> last = last_scored_positions(scored);
  const int64_t num_prompt_tokens = prompt_index.size(0);
  // completion_index: completion positions computed (0 .. last-1 per row); source: for each scored
  // token, its row in the pass's hidden states (the prompts' tokens, then the completions')
  std::vector<int64_t> completion_index, scored_flat, source;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      if (scored_a[b][t]) {
        scored_flat.push_back(b * T + t);
        // token t is scored by the prompt's last token (t = 0) or by completion position t-1, which
        // this row computed just before (it is the most recent entry of completion_index)
        source.push_back(t == 0 ? last_prompt_a[prompt_of_row_a[b]]
                                : num_prompt_tokens + static_cast<int64_t>(completion_index.size()) - 1);
      }
      if (t < last[static_cast<size_t>(b)]) completion_index.push_back(b * T + t);
    }
  if (scored_flat.empty()) return padded_logprobs(model, prompts, completion_ids_in, completion_mask_in, options);

  const int64_t P = prompt_ids.size(1);
  const auto prompt_positions = shifted_positions(prompt_ids.size(0), P, 0, options, device);
  torch::Tensor hidden;
  if (completion_index.empty()) {  // every row scores its first token only: the prompts alone
    hidden = model->forward_hidden(prompt_ids.to(device), prompt_mask.to(device), prompt_positions, nullptr,
                                   prompt_index.to(device));
  } else {  // one pass over the distinct prompts and the completions
    SharedPromptBatch shared;
    shared.prompt_ids = prompt_ids;
    shared.prompt_mask = prompt_mask;
    shared.prompt_positions = prompt_positions;
    shared.prompt_index = prompt_index;
    shared.completion_ids = completion_ids;
    shared.completion_positions =
        options.prompt_width > 0 ? shifted_positions(B, P, T, options, device).slice(1, P) : torch::Tensor();
    shared.attention_mask = torch::cat({prompt_mask.index_select(0, prompt_of_row), scored.to(torch::kInt64)}, 1);
    shared.completion_index = torch::tensor(completion_index, long_cpu);
    shared.row_prompts = prompt_of_row;
    hidden = model->forward_hidden_sharing_prompts(shared);
  }
  return score_packed(model, hidden, source, scored_flat, completion_ids, options);
}

// The pass without gradients in pieces along the sequence (completion_logprobs.h).
ops::LogprobsAndEntropies sequence_chunked_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                               const torch::Tensor& completion_ids_in,
                                               const torch::Tensor& completion_mask_in,
                                               const CompletionLogprobOptions& options) {
  const auto device = model->device();
  const int64_t B = completion_ids_in.size(0), T = completion_ids_in.size(1);
  const auto completion_ids = completion_ids_in.cpu().contiguous();
  const auto scored = (completion_mask_in.cpu() != 0).contiguous();
  const auto [distinct, prompt_of_row] = distinct_prompts(prompts, B);
  auto [prompt_ids, prompt_mask] = left_pad(distinct, options.pad_id);
  const int64_t P = prompt_ids.size(1);
  // positions 0 .. needed-1 score tokens 1 .. needed (a row's last scored token at most `needed`)
  int64_t needed = 0;
  for (int64_t last : last_scored_positions(scored)) needed = std::max(needed, last);
  const torch::Tensor weight = model->lm_head_weight();
  const torch::Tensor rows = prompt_of_row.to(device);

  KVCache cache;
  cache.capacity_hint = P + needed;
  const torch::Tensor prompt_hidden = model->forward_hidden(prompt_ids.to(device), prompt_mask.to(device),
                                                            shifted_positions(prompt_ids.size(0), P, 0, options, device), &cache);
  // token 0 is scored by its prompt's last position
  const ops::LogprobsAndEntropies first =
      ops::fused_logprobs(prompt_hidden.select(1, P - 1).index_select(0, rows).unsqueeze(1), weight, torch::Tensor(),
                     completion_ids.narrow(1, 0, 1).to(device), options.temperature, options.chunk_positions);
  auto logps = torch::zeros({B, T}, first.logps.options());
  auto entropies = torch::zeros({B, T}, first.entropies.options());
  logps.narrow(1, 0, 1).copy_(first.logps);
  entropies.narrow(1, 0, 1).copy_(first.entropies);
  if (distinct.size() != static_cast<size_t>(B)) cache.select_rows(prompt_of_row);
  auto mask = prompt_mask.index_select(0, prompt_of_row).to(device);
  const auto positions = shifted_positions(B, P, T, options, device);
  for (int64_t c0 = 0; c0 < needed; c0 += options.sequence_chunk) {
    const int64_t c1 = std::min(c0 + options.sequence_chunk, needed);
    mask = torch::cat({mask, scored.slice(1, c0, c1).to(torch::kInt64).to(device)}, 1);
    const torch::Tensor hidden = model->forward_hidden(completion_ids.slice(1, c0, c1).to(device), mask,
                                                       positions.defined() ? positions.slice(1, P + c0, P + c1) : torch::Tensor(),
                                                       &cache);
    // position c0 + j scores token c0 + j + 1
    const ops::LogprobsAndEntropies piece = ops::fused_logprobs(hidden, weight, torch::Tensor(), completion_ids.slice(1, c0 + 1, c1 + 1).to(device),
                                                      options.temperature, options.chunk_positions);
    logps.slice(1, c0 + 1, c1 + 1).copy_(piece.logps);
    entropies.slice(1, c0 + 1, c1 + 1).copy_(piece.entropies);
  }
  const auto outside = scored.logical_not().to(device);
  return {logps.masked_fill_(outside, 0.0), entropies.masked_fill_(outside, 0.0)};
}

}  // namespace

ops::LogprobsAndEntropies completion_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                         const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                         const CompletionLogprobOptions& options) {
  runtimeCheck(completion_ids.dim() == 2 && completion_mask.sizes() == completion_ids.sizes() &&
                   static_cast<int64_t>(prompts.size()) == completion_ids.size(0),
               "completion_logprobs: ", prompts.size(), " prompts, completion_ids ", completion_ids.sizes(),
               ", completion_mask ", completion_mask.sizes());
  if (completion_ids.size(1) > options.sequence_chunk && options.sequence_chunk > 0 && !torch::GradMode::is_enabled() &&
      model->config().rope.type != RopeType::Dynamic)
    return sequence_chunked_logprobs(model, prompts, completion_ids, completion_mask, options);
  if (!options.packed || completion_ids.size(1) == 0)
    return padded_logprobs(model, prompts, completion_ids, completion_mask, options);
  const bool checkpointing = model->gradient_checkpointing() && model->is_training() && torch::GradMode::is_enabled();
  // Dynamic RoPE sizes its frequencies on the call's furthest position: a prefix pass would rotate the
  // prompt's keys with other frequencies than the one pass (TRL's forward) does, so it takes one pass.
  const bool one_pass = checkpointing || model->config().rope.type == RopeType::Dynamic;
  if (one_pass) return unpadded_logprobs(model, prompts, completion_ids, completion_mask, options);
  return packed_logprobs(model, prompts, completion_ids, completion_mask, options);
}

}  // namespace rayless
