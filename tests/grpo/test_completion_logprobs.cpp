// The packed completion pass (shared prompt keys/values, no padding) against the padded [B, P + T]
// pass: same log-probs, entropies and parameter gradients, in float64 so that only the order of
// floating-point sums differs.
#include <catch2/catch.hpp>

#include "model/helpers.h"
#include "model/live_cpu_bytes.h"
#include "rayless/grpo/completion_logprobs.h"
#include "rayless/hf/model_directory.h"
#include "rayless/ops/ops.h"

using namespace rayless;
using namespace rayless::ops;

namespace {

struct Batch {
  std::vector<std::vector<int64_t>> prompts;
  torch::Tensor completion_ids, completion_mask;
};

// Rows share prompts out of order; completions end at different lengths; one row is fully masked
// (a masked truncated completion), one scores a single token, one runs to the full width.
Batch uneven_batch(int64_t vocab) {
  torch::manual_seed(11);
  auto prompt = [&](int64_t length) {
    auto ids = torch::randint(1, vocab, {length}, torch::kLong);
    return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
  };
  const auto a = prompt(5), b = prompt(2), c = prompt(7);
  Batch out;
  out.prompts = {a, b, a, c, b, a, c};
  const std::vector<int64_t> lengths = {4, 6, 1, 0, 3, 6, 2};
  const int64_t T = 6, B = static_cast<int64_t>(lengths.size());
  out.completion_ids = torch::randint(1, vocab, {B, T}, torch::kLong);
  out.completion_mask = torch::zeros({B, T}, torch::kFloat32);
  for (int64_t i = 0; i < B; ++i) {
    out.completion_mask[i].narrow(0, 0, lengths[static_cast<size_t>(i)]).fill_(1);
    out.completion_ids[i].narrow(0, lengths[static_cast<size_t>(i)], T - lengths[static_cast<size_t>(i)]).fill_(0);
  }
  out.completion_ids[3].fill_(5);  // the masked row still holds tokens, as a truncated completion does
  return out;
}

// Completions from 1 to 200 tokens (one masked): long and uneven enough that the packed pass attends
// in several length buckets.
Batch long_uneven_batch(int64_t vocab) {
  Batch out = uneven_batch(vocab);
  out.prompts.push_back(out.prompts[0]);
  const std::vector<int64_t> lengths = {3, 200, 1, 0, 90, 180, 30, 120};
  const int64_t T = 200, B = static_cast<int64_t>(lengths.size());
  out.completion_ids = torch::randint(1, vocab, {B, T}, torch::kLong);
  out.completion_mask = torch::zeros({B, T}, torch::kFloat32);
  for (int64_t i = 0; i < B; ++i) out.completion_mask[i].narrow(0, 0, lengths[static_cast<size_t>(i)]).fill_(1);
  return out;
}

struct Result {
  torch::Tensor logps, entropies;
  std::vector<torch::Tensor> grads;
};

Result run(CausalLM& model, const Batch& batch, bool packed) {
  model->zero_grad();
  CompletionLogprobOptions options;
  options.packed = packed;
  options.temperature = 0.7;
  options.chunk_positions = 5;
  auto out = completion_logprobs(model, batch.prompts, batch.completion_ids, batch.completion_mask, options);
  // a loss that weighs every scored token differently, so each gradient path is exercised
  const auto weights = torch::linspace(-1.0, 2.0, out.logps.numel(), out.logps.options()).view(out.logps.sizes());
  (out.logps * weights * batch.completion_mask.to(out.logps.dtype())).sum().backward();
  Result r;
  r.logps = out.logps.detach();
  r.entropies = out.entropies;
  for (auto& p : model->parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return r;
}

double masked_max_difference(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  return (a - b).abs().masked_select(mask.to(torch::kBool)).max().item<double>();
}

// The packed and padded passes of one float64 golden model on one batch: the same log-probs,
// entropies and parameter gradients, and zeros outside the mask from the packed pass.
void check_packed_equals_padded(const std::string& name, Batch (*make_batch)(int64_t vocab)) {
  INFO(name);
  CausalLM model = load_hf_model(test::golden_dir() / name);
  model->to(torch::kFloat64);
  model->train();
  const Batch batch = make_batch(model->config().vocab_size);
  const Result padded = run(model, batch, false);
  const Result packed = run(model, batch, true);
  CHECK(masked_max_difference(padded.logps, packed.logps, batch.completion_mask) < 1e-12);
  CHECK(masked_max_difference(padded.entropies, packed.entropies, batch.completion_mask) < 1e-12);
  // outside the mask the packed pass computes nothing and returns zeros
  CHECK(packed.logps.masked_select(batch.completion_mask == 0).abs().max().item<double>() == 0.0);
  REQUIRE(padded.grads.size() == packed.grads.size());
  double worst = 0.0, largest = 0.0;
  for (size_t i = 0; i < padded.grads.size(); ++i) {
    worst = std::max(worst, (padded.grads[i] - packed.grads[i]).abs().max().item<double>());
    largest = std::max(largest, padded.grads[i].abs().max().item<double>());
  }
  // RMSNorm and RoPE run in float32 inside the float64 model (as in transformers), so gradients
  // summed over tokens in a different order differ at float32 rounding, relative to their size
  CHECK(largest > 1e-3);  // the loss reaches the parameters at all
  CHECK(worst / largest < 1e-6);
}

}  // namespace

TEST_CASE("packed completion log-probs equal the padded pass, with gradients") {
  for (const std::string name : {"qwen2", "llama", "qwen3"})  // biases, grouped-query, q/k norms
    check_packed_equals_padded(name, uneven_batch);
}

TEST_CASE("packed pass in length buckets (completions of 1 to 200 tokens) equals the padded pass") {
  // the completion pass's query lengths (positions 0 .. last-1 are computed) need several buckets
  const std::vector<int64_t> computed = {0, 0, 2, 29, 89, 119, 179, 199};
  REQUIRE(plan_length_buckets(computed, 7, 4, kAttentionCallCost).size() > 1);
  for (const std::string name : {"qwen2", "qwen3"})  // grouped-query with biases; one kv head, q/k norms
    check_packed_equals_padded(name, long_uneven_batch);
}

TEST_CASE("packed pass in float32 stays within rounding of the padded pass") {
  CausalLM model = load_hf_model(test::golden_dir() / "qwen2");
  model->eval();
  torch::NoGradGuard no_grad;
  const Batch batch = uneven_batch(model->config().vocab_size);
  CompletionLogprobOptions options;
  options.packed = false;
  const auto padded = completion_logprobs(model, batch.prompts, batch.completion_ids, batch.completion_mask, options);
  options.packed = true;
  const auto packed = completion_logprobs(model, batch.prompts, batch.completion_ids, batch.completion_mask, options);
  CHECK(masked_max_difference(padded.logps, packed.logps, batch.completion_mask) < 1e-4);
}

TEST_CASE("with gradient checkpointing the packed pass (no shared prompts) gives equal gradients") {
  CausalLM model = load_hf_model(test::golden_dir() / "llama");
  model->to(torch::kFloat64);
  model->train();
  const Batch batch = uneven_batch(model->config().vocab_size);
  const Result packed = run(model, batch, true);
  model->set_gradient_checkpointing(true);
  const Result checkpointed = run(model, batch, true);
  const Result checkpointed_padded = run(model, batch, false);
  CHECK(masked_max_difference(packed.logps, checkpointed.logps, batch.completion_mask) < 1e-12);
  CHECK(masked_max_difference(checkpointed_padded.logps, checkpointed.logps, batch.completion_mask) < 1e-12);
  CHECK(checkpointed.logps.masked_select(batch.completion_mask == 0).abs().max().item<double>() == 0.0);  // packed
  for (size_t i = 0; i < packed.grads.size(); ++i) CHECK(torch::allclose(packed.grads[i], checkpointed.grads[i], 1e-5, 1e-7));
}

TEST_CASE("completion_logprobs rejects mismatched shapes") {
  CausalLM model = load_hf_model(test::golden_dir() / "qwen2");
  const Batch batch = uneven_batch(model->config().vocab_size);
  CompletionLogprobOptions options;
  CHECK_THROWS(completion_logprobs(model, batch.prompts, batch.completion_ids.narrow(0, 0, 3),
                                   batch.completion_mask.narrow(0, 0, 3), options));
}

// Issue 51 item 2: without gradients, completions longer than sequence_chunk go through the model in
// pieces on a KV cache of their prompt (the distinct prompts once, repeated for their rows): the same
// log-probs and entropies as the packed pass in one go, zeros outside the mask, for pieces that do not
// divide the length, a piece of one position, and rows whose completions end in different pieces.
TEST_CASE("the log-prob pass in pieces along the sequence equals the pass in one go") {
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    model->to(torch::kFloat64);
    model->eval();
    torch::NoGradGuard no_grad;
    const Batch batch = long_uneven_batch(model->config().vocab_size);
    // positions counted from the masks, and as in rows left-padded to 9 (the trainer's prompt_width)
    for (const int64_t prompt_width : {int64_t{0}, int64_t{9}})
    for (const int64_t piece : {int64_t{1}, int64_t{37}, int64_t{64}, int64_t{199}}) {
      INFO("prompt_width " << prompt_width << ", sequence_chunk " << piece);
      CompletionLogprobOptions options;
      options.temperature = 0.7;
      options.chunk_positions = 5;
      options.prompt_width = prompt_width;
      const auto whole = completion_logprobs(model, batch.prompts, batch.completion_ids, batch.completion_mask, options);
      options.sequence_chunk = piece;
      const auto pieces = completion_logprobs(model, batch.prompts, batch.completion_ids, batch.completion_mask, options);
      CHECK(masked_max_difference(whole.logps, pieces.logps, batch.completion_mask) < 1e-12);
      CHECK(masked_max_difference(whole.entropies, pieces.entropies, batch.completion_mask) < 1e-12);
      CHECK(pieces.logps.masked_select(batch.completion_mask == 0).abs().max().item<double>() == 0.0);
    }
  }
}

// What the training pass keeps for backward grows with the sequence squared only by the attention mask
// the layers share (1 byte per query and key): no float copy of it per layer (LibTorch's attention
// node keeps one, 4 bytes per query and key in float32, which at 16k tokens was 1 GiB a layer). The
// quadratic term of the bytes held after the forward, from three lengths T, 2T, 4T:
// f(4T) - 3 f(2T) + 2 f(T) = 6 a T^2 for f(x) = c + b x + a x^2.
TEST_CASE("the training pass holds the attention mask once, not a float copy per layer") {
  CausalLM model = load_hf_model(test::golden_dir() / "qwen2");  // float32, 2 layers
  model->train();
  const int64_t vocab = model->config().vocab_size, T = 60;
  torch::manual_seed(3);
  const auto prompt_ids = torch::randint(1, vocab, {5}, torch::kLong);
  const std::vector<std::vector<int64_t>> prompts{std::vector<int64_t>(prompt_ids.data_ptr<int64_t>(), prompt_ids.data_ptr<int64_t>() + 5)};
  const auto held_after_forward = [&](int64_t length) {
    const auto ids = torch::randint(1, vocab, {1, length}, torch::kLong);
    const auto mask = torch::ones({1, length}, torch::kFloat32);
    const test::LiveCpuBytes counted;
    const auto out = completion_logprobs(model, prompts, ids, mask, CompletionLogprobOptions{});
    REQUIRE(out.logps.requires_grad());
    return static_cast<double>(counted.live());
  };
  const double f1 = held_after_forward(T), f2 = held_after_forward(2 * T), f4 = held_after_forward(4 * T);
  const double bytes_per_query_and_key = (f4 - 3 * f2 + 2 * f1) / (6.0 * T * T);
  INFO("held after forward: " << f1 << ", " << f2 << ", " << f4 << " bytes; quadratic term " << bytes_per_query_and_key
                              << " bytes per query and key");
  CHECK(bytes_per_query_and_key < 2.0);
}
