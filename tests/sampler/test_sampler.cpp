#include <catch2/catch.hpp>

#include "model/helpers.h"
#include "rayless/base/error.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/safetensors.h"
#include "rayless/sampler/sampler.h"

using namespace rayless;

namespace {
CausalLM tiny_model(uint64_t seed = 5) {
  return load_hf_model(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny", torch::kFloat32, torch::kCPU, seed);
}
}  // namespace

TEST_CASE("logit processing matches transformers' processors") {
  auto tensors = load_safetensors(test::golden_dir() / "processors.safetensors");
  const auto meta = test::read_json(test::golden_dir() / "processors.json");
  auto ids = test::ids_tensor(meta["ids"]);
  for (size_t k = 0; k < meta["settings"].size(); ++k) {
    const auto& s = meta["settings"][k];
    SamplingParams p;
    p.repetition_penalty = s["repetition_penalty"];
    p.temperature = s["temperature"];
    p.top_k = s["top_k"];
    p.top_p = s["top_p"];
    p.min_p = s["min_p"];
    auto got = process_logits(tensors.at("scores"), ids, p);
    auto expected = tensors.at("processed_" + std::to_string(k));
    INFO("setting " << k);
    CHECK(torch::equal(torch::isinf(got), torch::isinf(expected)));
    auto finite = torch::isfinite(expected);
    CHECK((got.masked_select(finite) - expected.masked_select(finite)).abs().max().item<double>() < 1e-5);
  }
}

TEST_CASE("sampling is reproducible from the generator and rows repeat per prompt") {
  CausalLM model = tiny_model();
  SamplingParams p;
  p.max_new_tokens = 10;
  p.num_generations = 3;
  p.temperature = 1.3;
  p.eos_ids = {258};
  p.pad_id = 256;
  p.return_logprobs = true;
  std::vector<std::vector<int64_t>> prompts = {{104, 105}, {72, 101, 108, 108, 111}};
  const SamplingStream g1(42);
  const SamplingStream g2(42);
  const SamplingStream g3(43);
  auto a = generate(model, prompts, p, g1);
  auto b = generate(model, prompts, p, g2);
  auto c = generate(model, prompts, p, g3);
  CHECK(a.completion_ids.size(0) == 6);
  CHECK(torch::equal(a.completion_ids, b.completion_ids));
  CHECK(torch::equal(a.logprobs, b.logprobs));
  CHECK_FALSE(torch::equal(a.completion_ids, c.completion_ids));
  // rows 0..2 share prompt 0 (left-padded), rows 3..5 prompt 1
  CHECK(a.prompt_ids[0][3].item<int64_t>() == 104);
  CHECK(a.prompt_mask[0].sum().item<int64_t>() == 2);
  CHECK(torch::equal(a.prompt_ids[4], torch::tensor({72, 101, 108, 108, 111}, torch::kLong)));
  CHECK((a.logprobs <= 0).all().item<bool>());
}

TEST_CASE("sampled log-probs equal a fresh forward of prompt + completion") {
  CausalLM model = tiny_model(11);
  SamplingParams p;
  p.max_new_tokens = 6;
  p.temperature = 0.8;
  p.pad_id = 256;
  p.return_logprobs = true;
  const SamplingStream g(1);
  auto out = generate(model, {{1, 2, 3}, {4, 5, 6, 7, 8}}, p, g);
  auto ids = torch::cat({out.prompt_ids, out.completion_ids}, 1);
  auto mask = torch::cat({out.prompt_mask, out.completion_mask}, 1);
  torch::NoGradGuard no_grad;
  auto logits = model->forward(ids, mask) / 0.8;
  const int64_t p_len = out.prompt_ids.size(1), t_len = out.completion_ids.size(1);
  auto log_probs = logits.narrow(1, p_len - 1, t_len).log_softmax(-1);
  auto lp = log_probs.gather(2, out.completion_ids.unsqueeze(-1)).squeeze(-1);
  CHECK((lp - out.logprobs).abs().max().item<double>() < 1e-4);
  // entropies of the same tempered distribution, 0 after a row's end
  auto entropy = -(log_probs.exp() * log_probs).sum(-1) * out.completion_mask;
  REQUIRE(out.entropies.defined());
  CHECK((entropy - out.entropies).abs().max().item<double>() < 1e-4);
  CHECK(out.entropies.max().item<double>() > 1.0);  // a random model is far from certain
}

TEST_CASE("completion mask ends after the first EOS, truncation flagged") {
  CausalLM model = tiny_model();
  SamplingParams p;
  p.greedy = true;
  p.max_new_tokens = 8;
  p.pad_id = 256;
  const SamplingStream g(0);
  // find what greedy picks, then declare its third token an EOS
  auto free_run = generate(model, {{104, 105}}, p, g);
  REQUIRE(free_run.completion_ids.size(1) == 8);
  CHECK(free_run.truncated[0].item<bool>());
  CHECK(free_run.completion_mask.sum().item<int64_t>() == 8);
  const int64_t third = free_run.completion_ids[0][2].item<int64_t>();
  int64_t first_hit = 0;
  while (free_run.completion_ids[0][first_hit].item<int64_t>() != third) ++first_hit;
  p.eos_ids = {third};
  auto stopped = generate(model, {{104, 105}, {104, 105, 106}}, p, g);
  CHECK_FALSE(stopped.truncated[0].item<bool>());
  CHECK(stopped.completion_mask[0].sum().item<int64_t>() == first_hit + 1);  // EOS included
  for (int64_t t = first_hit + 1; t < stopped.completion_ids.size(1); ++t) {
    CHECK(stopped.completion_ids[0][t].item<int64_t>() == 256);
    CHECK(stopped.completion_mask[0][t].item<int64_t>() == 0);
  }
  // temperature 0 is greedy
  SamplingParams zero = p;
  zero.greedy = false;
  zero.temperature = 0.0;
  auto again = generate(model, {{104, 105}, {104, 105, 106}}, zero, g);
  CHECK(torch::equal(again.completion_ids, stopped.completion_ids));
}

TEST_CASE("stop strings end a completion after the token that completes them") {
  CausalLM model = tiny_model();
  auto tok = make_byte_tokenizer();
  SamplingParams p;
  p.greedy = true;
  p.max_new_tokens = 8;
  p.pad_id = 256;
  const SamplingStream g(0);
  auto free_run = generate(model, {{104, 105}}, p, g, tok.get());
  std::vector<int64_t> first3;
  for (int i = 1; i < 3; ++i) first3.push_back(free_run.completion_ids[0][i].item<int64_t>());
  const std::string stop = tok->decode(first3);
  p.stop_strings = {stop};
  auto stopped = generate(model, {{104, 105}}, p, g, tok.get());
  const int64_t kept = stopped.completion_mask.sum().item<int64_t>();
  std::vector<int64_t> kept_ids;
  for (int64_t t = 0; t < kept; ++t) kept_ids.push_back(stopped.completion_ids[0][t].item<int64_t>());
  CHECK(tok->decode(kept_ids).find(stop) != std::string::npos);
  CHECK(kept <= 3);
  CHECK_FALSE(stopped.truncated[0].item<bool>());
}

// Many EOS ids make rows finish at different steps, so the decode batch is compacted several times;
// a cache row paired with the wrong output row would break both checks below.
TEST_CASE("rows that finish leave the decode batch without disturbing the others") {
  CausalLM model = tiny_model(5);
  SamplingParams p;
  p.max_new_tokens = 12;
  p.num_generations = 4;
  p.temperature = 0.9;
  p.pad_id = 256;
  p.return_logprobs = true;
  for (int64_t id = 0; id < 48; ++id) p.eos_ids.push_back(id * 5);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8}, {9}};
  const SamplingStream g(3);
  auto out = generate(model, prompts, p, g);
  const auto lengths = out.completion_mask.sum(1);
  INFO("lengths " << lengths);
  CHECK(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
  CHECK(std::get<0>(at::_unique(lengths)).numel() >= 4);  // several distinct finishing steps
  // sampled log-probs = a fresh forward over prompt + completion
  auto ids = torch::cat({out.prompt_ids, out.completion_ids}, 1);
  auto mask = torch::cat({out.prompt_mask, out.completion_mask}, 1);
  {
    torch::NoGradGuard no_grad;
    auto logits = model->forward(ids, mask) / 0.9;
    const int64_t p_len = out.prompt_ids.size(1), t_len = out.completion_ids.size(1);
    auto lp = logits.narrow(1, p_len - 1, t_len).log_softmax(-1).gather(2, out.completion_ids.unsqueeze(-1)).squeeze(-1);
    lp = lp * out.completion_mask;
    CHECK((lp - out.logprobs).abs().max().item<double>() < 1e-4);
  }
  // after its end a row holds padding only
  CHECK(torch::equal(out.completion_ids.masked_select(out.completion_mask == 0),
                     torch::full({(out.completion_mask == 0).sum().item<int64_t>()}, 256, torch::kLong)));
  // greedy: the batched rows equal each prompt decoded alone
  p.greedy = true;
  p.num_generations = 1;
  p.eos_ids = {0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75, 80, 85, 90, 95, 100};
  auto batched = generate(model, prompts, p, g);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = generate(model, {prompts[i]}, p, g);
    const int64_t len = alone.completion_mask.sum().item<int64_t>();
    INFO("prompt " << i << " length " << len);
    CHECK(batched.completion_mask[static_cast<int64_t>(i)].sum().item<int64_t>() == len);
    CHECK(torch::equal(batched.completion_ids[static_cast<int64_t>(i)].narrow(0, 0, len), alone.completion_ids[0].narrow(0, 0, len)));
  }
}

TEST_CASE("golden: greedy continuations match transformers' generate") {
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    const auto expected = test::read_json(test::golden_dir() / (name + "-expected.json"));
    auto ids = test::ids_tensor(expected["input_ids"]);
    const auto prompts = test::unpadded_rows(ids, test::ids_tensor(expected["attention_mask"]));
    SamplingParams params;
    params.greedy = true;
    params.max_new_tokens = 12;
    params.eos_ids = {expected["eos_id"].get<int64_t>()};
    params.pad_id = expected["pad_id"].get<int64_t>();
    const SamplingStream gen(0);
    auto out = generate(model, prompts, params, gen);
    CHECK(torch::equal(out.completion_ids, test::ids_tensor(expected["greedy_completion"])));
    CHECK(torch::equal(out.prompt_ids, ids));
  }
}
