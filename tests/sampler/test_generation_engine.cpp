// The generation engine (generation_engine.h): a row's tokens do not depend on the slots, the refills,
// the sync interval or the batch it ran in; stop strings between the host's looks cut at the right
// token; the log-probs are those of a fresh forward; bad settings are refused.
#include <catch2/catch.hpp>

#include "model/helpers.h"
#include "rayless/base/error.h"
#include "rayless/hf/model_directory.h"
#include "rayless/ops/kernel_plan.h"
#include "rayless/sampler/generation_engine.h"
#include "rayless/sampler/sampler.h"

using namespace rayless;

namespace {
CausalLM tiny_model(uint64_t seed = 5) {
  return load_hf_model(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny", torch::kFloat32, torch::kCPU, seed);
}

// Many EOS ids and per-row limits: rows end at many different steps (greedy ones too, which a random
// model rarely ends by EOS), so slots are freed, refilled and packed often.
const std::vector<int64_t> kRowLimits = {14, 5, 9, 14, 2, 11, 14, 7, 14, 3, 12, 14};
SamplingParams varied_lengths(bool greedy) {
  SamplingParams p;
  p.max_new_tokens = 14;
  p.num_generations = 3;
  p.temperature = 0.9;
  p.greedy = greedy;
  p.pad_id = 256;
  p.return_logprobs = true;
  for (int64_t id = 0; id < 40; ++id) p.eos_ids.push_back(id * 6 + 1);
  p.row_max_new_tokens = kRowLimits;  // 4 prompts x 3 generations
  return p;
}

const std::vector<std::vector<int64_t>> kPrompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}, {12, 13}};

double masked_max_difference(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  return (a - b).abs().masked_select(mask.to(torch::kBool)).max().item<double>();
}

void check_same_rows(const GenerationOutput& a, const GenerationOutput& b) {
  CHECK(torch::equal(a.completion_ids, b.completion_ids));
  CHECK(torch::equal(a.completion_mask, b.completion_mask));
  CHECK(torch::equal(a.truncated, b.truncated));
  REQUIRE(a.completion_mask.sum().item<int64_t>() > 0);
  CHECK(masked_max_difference(a.logprobs, b.logprobs, a.completion_mask) < 1e-5);
  CHECK(masked_max_difference(a.entropies, b.entropies, a.completion_mask) < 1e-5);
}
}  // namespace

TEST_CASE("engine: a row's tokens do not depend on the slot count or the sync interval") {
  CausalLM model = tiny_model();
  for (const bool greedy : {false, true}) {
    INFO((greedy ? "greedy" : "sampled"));
    SamplingParams p = varied_lengths(greedy);
    const SamplingStream stream(21);
    const auto reference = generate(model, kPrompts, p, stream);  // every row in a slot of its own
    const auto lengths = reference.completion_mask.sum(1);
    INFO("lengths " << lengths);
    CHECK(std::get<0>(at::_unique(lengths)).numel() >= 4);  // several distinct ends
    for (const int64_t slots : {1, 2, 5}) {
      for (const int64_t sync : {1, 3, 8}) {
        // lagged looks (a GPU's default): each look read an interval late, the slots refilled then
        for (const char* lagged : {"off", "on"}) {
          INFO("slots " << slots << ", sync interval " << sync << ", lagged look " << lagged);
          p.slots = slots;
          p.sync_interval = sync;
          p.lagged_look = lagged;
          const auto out = generate(model, kPrompts, p, stream);
          check_same_rows(out, reference);
          CHECK(out.stats.slots == slots);
          CHECK(out.stats.host_syncs >= 1);
        }
      }
    }
  }
}

TEST_CASE("engine: lagged looks end rows an interval late, and only then refill their slots") {
  CausalLM model = tiny_model();
  SamplingParams p = varied_lengths(false);
  p.sync_interval = 1;
  p.slots = 3;
  const auto prompt_order = generate(model, kPrompts, p, SamplingStream(4));
  p.lagged_look = "on";
  const auto lagged = generate(model, kPrompts, p, SamplingStream(4));
  check_same_rows(lagged, prompt_order);
  // a row ended by EOS runs one more step before its look is read; one at its limit is read at once
  const int64_t rows = lagged.completion_ids.size(0);
  CHECK(lagged.stats.slot_steps > prompt_order.stats.slot_steps);
  CHECK(lagged.stats.slot_steps <= lagged.stats.tokens + rows);
  CHECK(prompt_order.stats.slot_steps == prompt_order.stats.tokens);
  p.lagged_look = "sometimes";
  CHECK_THROWS_WITH(generate(model, kPrompts, p, SamplingStream(4)), Catch::Contains("lagged_look"));
  // the device decides under auto: on a CUDA device only
  p.lagged_look = "auto";
  CHECK_FALSE(resolve_engine_settings(p, 8, torch::kCPU, false).lagged_look);
  CHECK(resolve_engine_settings(p, 8, torch::Device(torch::kCUDA, 0), false).lagged_look);
}

TEST_CASE("engine: continuous batching gives each row the tokens it gets generated alone") {
  CausalLM model = tiny_model(7);
  for (const bool greedy : {false, true}) {
    INFO((greedy ? "greedy" : "sampled"));
    SamplingParams p = varied_lengths(greedy);
    p.slots = 2;  // rows queue for the slots: most start after a refill
    const SamplingStream stream(8, /*first_row=*/100);
    const auto batch = generate(model, kPrompts, p, stream);
    SamplingParams alone = p;
    alone.num_generations = 1;
    alone.slots = 0;
    for (int64_t row = 0; row < batch.completion_ids.size(0); ++row) {
      INFO("row " << row);
      SamplingStream own(8);
      own.rows = {100 + row};
      alone.row_max_new_tokens = {kRowLimits[static_cast<size_t>(row)]};
      const auto one = generate(model, {kPrompts[static_cast<size_t>(row / p.num_generations)]}, alone, own);
      const int64_t length = batch.completion_mask[row].sum().item<int64_t>();
      REQUIRE(one.completion_mask[0].sum().item<int64_t>() == length);
      CHECK(torch::equal(one.completion_ids[0].narrow(0, 0, length), batch.completion_ids[row].narrow(0, 0, length)));
      CHECK((one.logprobs[0].narrow(0, 0, length) - batch.logprobs[row].narrow(0, 0, length)).abs().max().item<double>() < 1e-5);
    }
    // the generations of a prompt differ from one another when sampled (their own uniforms)
    if (!greedy) CHECK_FALSE(torch::equal(batch.completion_ids[0], batch.completion_ids[1]));
  }
}

TEST_CASE("engine: looking at every step, a slot computes exactly its row's tokens") {
  CausalLM model = tiny_model();
  SamplingParams p = varied_lengths(false);
  p.sync_interval = 1;
  for (const int64_t slots : {0, 1, 3}) {
    INFO("slots " << slots);
    p.slots = slots;
    const auto out = generate(model, kPrompts, p, SamplingStream(4));
    const int64_t tokens = out.completion_mask.sum().item<int64_t>();
    CHECK(out.stats.tokens == tokens);
    CHECK(out.stats.slot_steps == tokens);  // no slot computes for a row that ended, none idles
    CHECK(out.stats.occupancy() == 1.0);
    CHECK(out.stats.host_syncs == out.stats.decode_steps);
  }
  // looking every 4 steps: a row's slot runs on past its end until the next look, at most 3 steps
  p.sync_interval = 4;
  p.slots = 0;
  const auto out = generate(model, kPrompts, p, SamplingStream(4));
  CHECK(out.stats.slot_steps >= out.stats.tokens);
  CHECK(out.stats.slot_steps <= out.stats.tokens + 3 * out.completion_ids.size(0));
  CHECK(out.stats.host_syncs <= (out.stats.decode_steps + 3) / 4 + 1);
}

TEST_CASE("engine: sampled log-probs and entropies equal a fresh forward over prompt + completion") {
  CausalLM model = tiny_model(11);
  SamplingParams p = varied_lengths(false);
  p.slots = 3;
  p.sync_interval = 3;
  p.top_k = 20;  // processing changes the sampling distribution, not the reported log-probs
  const auto out = generate(model, kPrompts, p, SamplingStream(2));
  const auto ids = torch::cat({out.prompt_ids, out.completion_ids}, 1);
  const auto mask = torch::cat({out.prompt_mask, out.completion_mask}, 1);
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(ids, mask) / p.temperature;
  const int64_t prompt_width = out.prompt_ids.size(1), width = out.completion_ids.size(1);
  const auto log_probs = logits.narrow(1, prompt_width - 1, width).log_softmax(-1);
  const auto chosen = log_probs.gather(2, out.completion_ids.unsqueeze(-1)).squeeze(-1);
  CHECK(masked_max_difference(chosen, out.logprobs, out.completion_mask) < 1e-4);
  const auto entropy = -(log_probs.exp() * log_probs).sum(-1);
  CHECK(masked_max_difference(entropy, out.entropies, out.completion_mask) < 1e-4);
  // after a row's end: padding, log-prob 0, entropy 0
  const auto after = out.completion_mask == 0;
  CHECK((out.completion_ids.masked_select(after) == 256).all().item<bool>());
  CHECK((out.logprobs.masked_select(after) == 0).all().item<bool>());
  CHECK((out.entropies.masked_select(after) == 0).all().item<bool>());
  // a token of probability 0 after top-k is never sampled: every chosen token is in its row's top 20
  const auto kth = std::get<0>(logits.narrow(1, prompt_width - 1, width).topk(20, -1)).narrow(-1, 19, 1).squeeze(-1);
  const auto chosen_logit = logits.narrow(1, prompt_width - 1, width).gather(2, out.completion_ids.unsqueeze(-1)).squeeze(-1);
  CHECK((chosen_logit >= kth).masked_select(out.completion_mask.to(torch::kBool)).all().item<bool>());
}

TEST_CASE("engine: a stop string completed between the host's looks cuts the row at its token") {
  CausalLM model = tiny_model();
  auto tok = make_byte_tokenizer();
  SamplingParams p;
  p.greedy = true;
  p.max_new_tokens = 12;
  p.pad_id = 256;
  p.return_logprobs = true;
  const std::vector<std::vector<int64_t>> prompts = {{104, 105}, {72, 101, 108}};
  const auto free_run = generate(model, prompts, p, SamplingStream(0), tok.get());
  // a stop string that row 0 completes at its third token
  std::vector<int64_t> second_third = {free_run.completion_ids[0][1].item<int64_t>(), free_run.completion_ids[0][2].item<int64_t>()};
  const std::string stop = tok->decode(second_third);
  p.stop_strings = {stop};
  p.sync_interval = 1;
  const auto every_step = generate(model, prompts, p, SamplingStream(0), tok.get());
  for (const int64_t sync : {1, 2, 5, 12}) for (const char* lagged : {"off", "on"}) {
    INFO("sync interval " << sync << ", lagged look " << lagged);
    p.sync_interval = sync;
    p.lagged_look = lagged;
    const auto out = generate(model, prompts, p, SamplingStream(0), tok.get());
    check_same_rows(out, every_step);
    std::vector<int64_t> kept;
    for (int64_t t = 0; t < out.completion_mask[0].sum().item<int64_t>(); ++t) kept.push_back(out.completion_ids[0][t].item<int64_t>());
    CHECK(tok->decode(kept).find(stop) != std::string::npos);
    kept.pop_back();
    CHECK(tok->decode(kept).find(stop) == std::string::npos);  // the token that completed it is the last
    CHECK(static_cast<int64_t>(kept.size()) + 1 <= 3);
    CHECK_FALSE(out.truncated[0].item<bool>());
  }
}

TEST_CASE("engine: repetition penalty counts the row's prompt as one batch pads it, whatever the slots") {
  CausalLM model = tiny_model(3);
  SamplingParams p = varied_lengths(false);
  p.repetition_penalty = 1.7;
  const auto reference = generate(model, kPrompts, p, SamplingStream(6));
  p.slots = 2;
  p.sync_interval = 3;
  check_same_rows(generate(model, kPrompts, p, SamplingStream(6)), reference);
}

TEST_CASE("engine: bad settings are refused with the key named") {
  SamplingParams p;
  p.slots = -1;
  CHECK_THROWS_WITH(resolve_engine_settings(p, 8, torch::kCPU, false), Catch::Contains("generation.slots"));
  p.slots = 0;
  p.sync_interval = -2;
  CHECK_THROWS_WITH(resolve_engine_settings(p, 8, torch::kCPU, false), Catch::Contains("generation.sync_interval"));
  p.sync_interval = 0;
  p.prefill_chunk = -1;
  CHECK_THROWS_AS(resolve_engine_settings(p, 8, torch::kCPU, false), InputError);
  p.prefill_chunk = 0;
  const auto cpu = resolve_engine_settings(p, 8, torch::kCPU, false);
  CHECK(cpu.slots == 8);
  CHECK(cpu.sync_interval == 1);
  CHECK(resolve_engine_settings(p, 8, torch::Device(torch::kCUDA, 0), false).sync_interval == 8);
  p.slots = 3;
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, false).slots == 3);
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, /*single_wave=*/true).slots == 8);
  CHECK(resolve_engine_settings(p, 2, torch::kCPU, false).slots == 2);
}

// generation.slots = "auto": the slots whose KV cache and logits fit in half of the memory, counted
// per slot from the model's config (checked against the keys and values a prefill really holds).
TEST_CASE("engine: generation.slots auto is what fits in half of the memory, at most the rows") {
  CHECK(auto_slots(100, 1000, 16) == 5);                  // half of 1000 bytes, 100 each
  CHECK(auto_slots(100, 1199, 16) == 5);                  // whole slots only
  CHECK(auto_slots(100, int64_t{1} << 40, 16) == 16);     // never more than the rows
  CHECK(auto_slots(100, 10, 16) == 1);                    // at least one
  CHECK(auto_slots(100, -1, 16) == 16);                   // memory not known: every row

  CausalLM model = tiny_model();
  const ModelArchConfig& arch = model->config();
  const int64_t positions = 10;
  KVCache cache;
  {
    c10::InferenceMode inference;
    auto [ids, mask] = left_pad({std::vector<int64_t>(positions, 7)}, 256);
    model->forward_hidden(ids, mask, {}, &cache);
  }
  int64_t cache_bytes = 0;
  for (size_t l = 0; l < cache.keys.size(); ++l)
    cache_bytes += static_cast<int64_t>(cache.keys[l].nbytes() + cache.values[l].nbytes());
  REQUIRE(cache_bytes > 0);
  const int64_t logits_bytes = 4 * arch.vocab_size;
  CHECK(slot_bytes(arch, torch::kFloat32, positions) == cache_bytes + logits_bytes);
  CHECK(slot_bytes(arch, torch::kBFloat16, positions) == cache_bytes / 2 + logits_bytes);

  SamplingParams p;
  const SlotMemory memory{100, 600, "test memory"};
  const auto fitted = resolve_engine_settings(p, 8, torch::kCPU, false, memory);
  CHECK(fitted.slots == 3);
  CHECK_THAT(fitted.slots_reason, Catch::Contains("generation.slots auto") && Catch::Contains("test memory"));
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, /*single_wave=*/true, memory).slots == 8);
  p.slots = 5;  // a count given is taken as it is
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, false, memory).slots == 5);

  // end to end: this machine has room for the tiny model's 12 rows
  const auto out = generate(model, kPrompts, varied_lengths(true), SamplingStream(3));
  CHECK(out.stats.slots == 12);
}

TEST_CASE("engine: decode steps in the shapes CUDA graphs replay give the same rows") {
  CausalLM model = tiny_model(9);
  for (const bool greedy : {false, true}) {
    INFO((greedy ? "greedy" : "sampled"));
    SamplingParams p = varied_lengths(greedy);
    p.repetition_penalty = 1.3;
    const auto reference = generate(model, kPrompts, p, SamplingStream(13));
    for (const int64_t slots : {3, 8}) {
      INFO("slots " << slots);
      p.slots = slots;
      p.sync_interval = 2;
      p.fixed_shapes = true;
      const auto fixed = generate(model, kPrompts, p, SamplingStream(13));
      check_same_rows(fixed, reference);
      // idle slots of a bucket are computed too (8 slots: 5 to 7 live ones run as 8)
      if (slots == 8) CHECK(fixed.stats.slot_steps > fixed.stats.tokens);
      p.fixed_shapes = false;
    }
  }
}

// The CPU's decode kernels run inside the engine's decode step (forward_slots): switched off, the
// log-probs differ in rounding somewhere, and the tokens stay the same.
TEST_CASE("engine: the CPU's one-pass decode kernels run in the engine's step") {
  CausalLM model = tiny_model(2);
  SamplingParams p = varied_lengths(true);
  p.slots = 4;
  for (const ops::Kernel kernel : {ops::Kernel::avx2_decode_attention, ops::Kernel::avx2_decode_rms_norm,
                                   ops::Kernel::avx2_decode_silu_times}) {
    INFO("kernel " << static_cast<int>(kernel));
    if (!ops::kernel_plan().on(kernel)) {
      WARN("kernel " << static_cast<int>(kernel) << " is off on this CPU: not exercised here");
      continue;
    }
    const auto with_kernel = generate(model, kPrompts, p, SamplingStream(1));
    GenerationOutput without;
    {
      const ops::KernelOverride off(kernel, false);
      without = generate(model, kPrompts, p, SamplingStream(1));
    }
    CHECK(torch::equal(with_kernel.completion_ids, without.completion_ids));
    CHECK(masked_max_difference(with_kernel.logprobs, without.logprobs, with_kernel.completion_mask) < 1e-5);
    CHECK_FALSE(torch::equal(with_kernel.logprobs, without.logprobs));  // it ran
  }
}

// A prompt wider than generation.prefill_chunk goes through the model in pieces of that many
// positions on the cache it fills (bounded memory for long prompts): the same rows as one pass, for
// left-padded chunks of several prompts (auto) and for one long prompt alone.
TEST_CASE("engine: prompts prefilled in pieces along the sequence give the rows of one pass") {
  CausalLM model = tiny_model();
  const std::vector<std::vector<int64_t>> prompts = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, {14, 15}, {16, 17, 18, 19, 20, 21, 22, 23, 24}, {25}};
  for (const bool greedy : {false, true}) {
    INFO((greedy ? "greedy" : "sampled"));
    SamplingParams p = varied_lengths(greedy);
    const SamplingStream stream(8);
    const auto one_pass = generate(model, prompts, p, stream);  // auto: every prompt in one pass of 13 positions
    CHECK(one_pass.stats.prefills == 1);
    for (const int64_t chunk : {1, 4, 5}) {
      INFO("generation.prefill_chunk " << chunk);
      p.prefill_chunk = chunk;
      check_same_rows(generate(model, prompts, p, stream), one_pass);
    }
  }
  SamplingParams p;
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, false).prefill_positions == kAutoPrefillPositions);
  p.prefill_chunk = 5;
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, false).prefill_positions == 5);
  CHECK(resolve_engine_settings(p, 8, torch::kCPU, /*single_wave=*/true).prefill_positions == 0);
}

// Issue 50 item 4: a row that ended its turn (a tool call) keeps its keys and values; when it comes back
// with the tool's result appended, only the new tokens run through the model, and it samples what a
// fresh prefill of the whole conversation samples (the same random numbers, the same tokens, log-probs
// within float32 rounding), whatever the slots and the sync interval.
TEST_CASE("engine: rows resumed from their kept keys and values sample as a fresh prefill of the conversation does") {
  CausalLM model = tiny_model();
  for (const bool greedy : {false, true}) {
    INFO((greedy ? "greedy" : "sampled"));
    const SamplingParams p = varied_lengths(greedy);
    const SamplingStream stream(31);
    KeptKV kept;
    const auto first = generate(model, kPrompts, p, stream, nullptr, &kept);
    CHECK(kept.size() == 12);  // every row of the turn, by its global row
    // rows 0, 2, 5, 7, 11 continue: prompt + their turn + a tool result of 1 to 9 tokens; row 7's turn
    // is cut to 2 tokens first (as the tool loop cuts a turn to the row's budget)
    const std::vector<size_t> rows = {0, 2, 5, 7, 11};
    std::vector<std::vector<int64_t>> conversations;
    int64_t expected_fed = 0, fresh_fed = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      const int64_t r = static_cast<int64_t>(rows[k]);
      const auto& prompt = kPrompts[static_cast<size_t>(r / 3)];
      const int64_t length = first.completion_mask[r].sum().item<int64_t>();
      std::vector<int64_t> conversation = prompt;
      const int64_t used = rows[k] == 7 ? std::min<int64_t>(length, 2) : length;
      for (int64_t t = 0; t < used; ++t) conversation.push_back(first.completion_ids[r][t].item<int64_t>());
      for (int64_t t = 0; t < static_cast<int64_t>(2 * k + 1); ++t) conversation.push_back(60 + 7 * t + static_cast<int64_t>(k));
      // kept: the prompt and the whole turn but its last token; the conversation shares prompt + used
      const int64_t valid = static_cast<int64_t>(prompt.size()) + std::max<int64_t>(length - 1, 0);
      const int64_t shared = static_cast<int64_t>(prompt.size()) + used;
      expected_fed += static_cast<int64_t>(conversation.size()) - std::min({shared, valid, static_cast<int64_t>(conversation.size()) - 1});
      fresh_fed += static_cast<int64_t>(conversation.size());
      conversations.push_back(conversation);
    }
    SamplingParams q = p;
    q.num_generations = 1;
    q.max_new_tokens = 10;
    q.row_max_new_tokens.clear();
    const SamplingStream turn = continuation_stream(stream, 1, rows);
    const auto fresh = generate(model, conversations, q, turn);
    CHECK(fresh.stats.prefill_tokens == fresh_fed);
    for (const int64_t slots : {0, 1, 2}) {
      for (const int64_t sync : {1, 3}) {
        const char* lagged = slots == 1 ? "on" : "off";
        INFO("slots " << slots << ", sync interval " << sync << ", lagged look " << lagged);
        KeptKV store = kept;  // each run takes the kept rows it resumes
        q.slots = slots;
        q.sync_interval = sync;
        q.lagged_look = lagged;
        const auto resumed = generate(model, conversations, q, turn, nullptr, &store);
        check_same_rows(resumed, fresh);
        CHECK(store.resumed_rows == 5);
        CHECK(resumed.stats.prefill_tokens == expected_fed);  // only the new tokens ran
        CHECK(expected_fed < fresh_fed / 2);
      }
    }
    // the conversations that left the loop are dropped at the next turn; the ones that ended it stay
    KeptKV store = kept;
    generate(model, conversations, q, turn, nullptr, &store);
    CHECK(store.size() == rows.size());
    // a store over its budget keeps nothing: the next turn prefills, and samples the same
    KeptKV small;
    small.budget_bytes = 1;
    generate(model, kPrompts, p, stream, nullptr, &small);
    CHECK(small.empty());
    CHECK(small.dropped_rows == 12);
    const auto prefilled = generate(model, conversations, q, turn, nullptr, &small);
    check_same_rows(prefilled, fresh);
    CHECK(prefilled.stats.prefill_tokens == fresh_fed);
    // left to itself the budget is the first generation's slot cache: all 12 rows fit in it
    CHECK(kept.budget_bytes > 0);
    CHECK(kept.bytes() <= kept.budget_bytes);
  }
}
