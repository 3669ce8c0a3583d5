// RoPE scaling types (linear, dynamic, llama3, yarn), sliding-window attention and Mistral against the
// fixtures of tools/make_rope_golden.py (transformers 5.24): logits of a left-padded batch longer than
// the windows and original lengths, greedy generate() continuations crossing them, and agreement of
// the training passes (padded, packed, checkpointed) and the KV-cached path with one another.
#include <catch2/catch.hpp>

#include <cstdio>

#include "helpers.h"
#include "rayless/base/error.h"
#include "rayless/grpo/completion_logprobs.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/safetensors.h"
#include "rayless/sampler/sampler.h"

using namespace rayless;

namespace {

const std::vector<std::string> kCases = {"llama-llama3", "llama-dynamic", "qwen2-yarn",
                                         "qwen2-window", "qwen3-window", "mistral-window"};

std::filesystem::path rope_dir() { return test::golden_dir() / "rope"; }

double masked_max_error(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto keep = mask.to(torch::kBool);
  if (a.dim() == 3) keep = keep.unsqueeze(-1).expand_as(a);
  return (a - b).abs().masked_select(keep).max().item<double>();
}

GenerationOutput greedy(CausalLM& model, const nlohmann::json& expected, int64_t num_generations = 1) {
  SamplingParams params;
  params.greedy = true;
  params.max_new_tokens = expected["max_new_tokens"].get<int64_t>();
  params.num_generations = num_generations;
  params.eos_ids = {expected["eos_id"].get<int64_t>()};
  params.pad_id = expected["pad_id"].get<int64_t>();
  params.return_logprobs = true;
  const SamplingStream gen(0);
  const auto prompts = test::unpadded_rows(test::ids_tensor(expected["prompt_ids"]), test::ids_tensor(expected["prompt_mask"]));
  return generate(model, prompts, params, gen);
}

nlohmann::json config_of(const std::string& name) { return test::read_json(rope_dir() / name / "config.json"); }

std::string error_of(const nlohmann::json& config) {
  try {
    ModelArchConfig::from_json(config, "x/config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("golden: logits with RoPE scaling and sliding windows match transformers (fp32)") {
  for (const auto& name : kCases) {
    INFO(name);
    CausalLM model = load_hf_model(rope_dir() / name);
    model->eval();
    const auto expected_json = test::read_json(rope_dir() / (name + "-expected.json"));
    auto expected = load_safetensors(rope_dir() / (name + "-expected.safetensors"));
    const auto ids = test::ids_tensor(expected_json["input_ids"]);
    const auto mask = test::ids_tensor(expected_json["attention_mask"]);
    torch::NoGradGuard no_grad;
    const double error = masked_max_error(model->forward(ids, mask), expected.at("logits"), mask);
    const auto arange = torch::arange(ids.size(1), torch::kLong).unsqueeze(0).expand_as(ids);
    const double error_default =
        masked_max_error(model->logits(model->forward_hidden(ids, mask, arange)), expected.at("logits_default_positions"), mask);
    std::printf("rope golden %-15s logits max |diff| %.3g (mask positions), %.3g (positions 0..T-1)\n", name.c_str(),
                error, error_default);
    CHECK(error <= 1e-4);
    CHECK(error_default <= 1e-4);
  }
}

TEST_CASE("golden: greedy generate with RoPE scaling and sliding windows matches transformers") {
  for (const auto& name : kCases) {
    INFO(name);
    CausalLM model = load_hf_model(rope_dir() / name);
    const auto expected_json = test::read_json(rope_dir() / (name + "-expected.json"));
    auto expected = load_safetensors(rope_dir() / (name + "-expected.safetensors"));
    const auto out = greedy(model, expected_json);
    CHECK(torch::equal(out.completion_ids, test::ids_tensor(expected_json["greedy_completion"])));
    // a row finished early (the fixture picks its EOS so): the others decode without it
    CHECK(out.truncated.logical_not().any().item<bool>());
    const double error = masked_max_error(out.logprobs, expected.at("greedy_logprobs"), out.completion_mask);
    std::printf("rope golden %-15s greedy tokens %s, chosen-token log-prob max |diff| %.3g\n", name.c_str(),
                torch::equal(out.completion_ids, test::ids_tensor(expected_json["greedy_completion"])) ? "equal" : "DIFFER",
                error);
    CHECK(error <= 1e-4);
  }
}

TEST_CASE("RoPE scaling and windows: packed, checkpointed and padded completion log-probs agree") {
  for (const auto& name : kCases) {
    INFO(name);
    CausalLM model = load_hf_model(rope_dir() / name, torch::kFloat64);
    const auto expected_json = test::read_json(rope_dir() / (name + "-expected.json"));
    const auto generated = greedy(model, expected_json, /*num_generations=*/2);
    const auto prompts = test::unpadded_rows(generated.prompt_ids, generated.prompt_mask);
    auto run = [&](bool packed, bool checkpointing, int64_t prompt_width) {
      model->train();
      model->set_gradient_checkpointing(checkpointing);
      model->zero_grad();
      CompletionLogprobOptions options;
      options.packed = packed;
      options.pad_id = expected_json["pad_id"].get<int64_t>();
      options.prompt_width = prompt_width;
      auto out = completion_logprobs(model, prompts, generated.completion_ids, generated.completion_mask, options);
      (out.logps * generated.completion_mask.to(out.logps.dtype())).sum().backward();
      std::vector<torch::Tensor> grads;
      for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
      model->set_gradient_checkpointing(false);
      return std::make_pair(out.logps.detach(), grads);
    };
    for (const int64_t prompt_width : {int64_t{0}, generated.prompt_ids.size(1) + 3}) {
      const auto padded = run(false, false, prompt_width);
      for (const bool checkpointing : {false, true}) {
        const auto packed = run(true, checkpointing, prompt_width);
        CHECK(masked_max_error(packed.first, padded.first, generated.completion_mask) < 1e-10);
        for (size_t i = 0; i < padded.second.size(); ++i) CHECK(torch::allclose(packed.second[i], padded.second[i], 1e-8, 1e-10));
      }
    }
  }
}

TEST_CASE("sliding windows: the KV-cached incremental forward equals the full forward") {
  for (const std::string name : {"qwen2-window", "qwen3-window", "mistral-window", "llama-llama3", "qwen2-yarn"}) {
    INFO(name);
    CausalLM model = load_hf_model(rope_dir() / name);
    model->eval();
    torch::NoGradGuard no_grad;
    const auto expected_json = test::read_json(rope_dir() / (name + "-expected.json"));
    const auto ids = test::ids_tensor(expected_json["input_ids"]);
    const auto mask = test::ids_tensor(expected_json["attention_mask"]);
    const auto full = model->forward(ids, mask);
    KVCache cache;
    const int64_t prefix = 9, width = ids.size(1);
    std::vector<torch::Tensor> steps{model->logits(model->forward_hidden(ids.narrow(1, 0, prefix), mask.narrow(1, 0, prefix), {}, &cache))};
    for (int64_t t = prefix; t < width; ++t)
      steps.push_back(model->logits(model->forward_hidden(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), {}, &cache)));
    CHECK(masked_max_error(torch::cat(steps, 1), full, mask) < 1e-5);
  }
}

TEST_CASE("RoPE config: old and new spellings read the same, as transformers standardizes them") {
  const auto fresh = config_of("qwen2-yarn");  // rope_scaling {rope_type: yarn, ...} + top-level rope_theta
  const auto a = ModelArchConfig::from_json(fresh, "a").rope;
  auto spelled = fresh;
  spelled.erase("rope_scaling");
  spelled["rope_parameters"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16},
                                {"rope_theta", 10000.0}};
  const auto b = ModelArchConfig::from_json(spelled, "b").rope;
  CHECK(a.type == RopeType::Yarn);
  CHECK(b.type == RopeType::Yarn);
  CHECK(a.attention_factor == Approx(0.1 * std::log(4.0) + 1.0));
  CHECK(b.attention_factor == a.attention_factor);
  CHECK(a.original_max_position_embeddings == 16);
  // rope_scaling wins over rope_parameters; rope_type wins over type; the dict's rope_theta wins
  auto both = fresh;
  both["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  both["rope_scaling"] = {{"type", "dynamic"}, {"rope_type", "linear"}, {"factor", 3.0}, {"rope_theta", 500.0}};
  const auto c = ModelArchConfig::from_json(both, "c").rope;
  CHECK(c.type == RopeType::Linear);
  CHECK(c.factor == 3.0);
  CHECK(c.theta == 500.0);
  // an empty rope_scaling falls back to rope_parameters
  both["rope_scaling"] = nlohmann::json::object();
  CHECK(ModelArchConfig::from_json(both, "d").rope.factor == 2.0);
  // yarn without a factor derives it from the two lengths; mscale/mscale_all_dim set the attention factor
  auto derived = fresh;
  derived["rope_scaling"] = {{"type", "yarn"}, {"factor", nullptr}, {"original_max_position_embeddings", 16},
                             {"mscale", 1.0}, {"mscale_all_dim", 0.5}};
  const auto d = ModelArchConfig::from_json(derived, "e").rope;
  CHECK(d.factor == 4.0);  // max_position_embeddings 64 / 16
  CHECK(d.attention_factor == Approx((0.1 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0)));
}

TEST_CASE("dynamic RoPE follows transformers' state across KV-cached calls") {
  RopeConfig c;
  c.type = RopeType::Dynamic;
  c.factor = 2.0;
  RotaryEmbedding rope(c, 16, /*max_position_embeddings=*/16);
  auto positions = [](int64_t first, int64_t count) { return torch::arange(first, first + count, torch::kLong).unsqueeze(0); };
  auto cos_of = [&](const torch::Tensor& p, DynamicRopeState* s) { return rope.tables(p, torch::kFloat32, s).cos; };
  const auto original = rope.inverse_frequencies(16);
  CHECK(torch::equal(rope.inverse_frequencies(8), original));   // up to the original length: unscaled
  CHECK(!torch::allclose(rope.inverse_frequencies(20), original));
  DynamicRopeState state;
  cos_of(positions(0, 12), &state);  // prefill of 12: unscaled
  CHECK(state.cached_length == 16);
  for (int64_t p = 12; p < 20; ++p) cos_of(positions(p, 1), &state);  // decoding past 16 grows it each step
  CHECK(state.cached_length == 20);
  CHECK(state.positions_seen == 20);
  // a call shorter than the cache but past the original length keeps the larger frequencies
  DynamicRopeState grown{24, 0};
  cos_of(positions(0, 18), &grown);
  CHECK(grown.cached_length == 24);
  DynamicRopeState reset{24, 0};
  cos_of(positions(0, 10), &reset);  // shorter than the original: back to it
  CHECK(reset.cached_length == 16);
  // a decoding step counts as advancing every row the batch held, also rows dropped since
  DynamicRopeState dropped{20, 20};
  cos_of(positions(15, 1), &dropped);
  CHECK(dropped.cached_length == 21);
  // without a cache each call is sized on its own positions, as with a fresh one
  DynamicRopeState fresh;
  CHECK(torch::equal(cos_of(positions(0, 20), nullptr), cos_of(positions(0, 20), &fresh)));
}

TEST_CASE("sliding-window layouts are read as transformers reads each family") {
  auto qwen2 = config_of("qwen2-window");  // use_sliding_window, sliding_window 4, max_window_layers 1
  auto layout = ModelArchConfig::from_json(qwen2, "q").attention;
  CHECK(layout.sliding_window == 4);
  CHECK(layout.sliding == std::vector<bool>{false, true});
  qwen2["max_window_layers"] = 0;
  CHECK(ModelArchConfig::from_json(qwen2, "q").attention.sliding == std::vector<bool>{true, true});
  qwen2["use_sliding_window"] = false;  // the window exists only with use_sliding_window
  CHECK(!ModelArchConfig::from_json(qwen2, "q").attention.any_sliding());
  qwen2["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK(error_of(qwen2).find("no window") != std::string::npos);
  auto qwen3 = config_of("qwen3-window");
  CHECK(ModelArchConfig::from_json(qwen3, "q3").attention.sliding == std::vector<bool>{true, false});
  qwen3["layer_types"] = {"sliding_attention", "chunked_attention"};
  CHECK(error_of(qwen3).find("layer_types[1] = \"chunked_attention\" is not supported") != std::string::npos);
  auto mistral = config_of("mistral-window");
  CHECK(ModelArchConfig::from_json(mistral, "m").attention.sliding == std::vector<bool>{true, true});
  mistral.erase("sliding_window");  // MistralConfig's default
  CHECK(ModelArchConfig::from_json(mistral, "m").attention.sliding_window == 4096);
  mistral["sliding_window"] = nullptr;
  CHECK(!ModelArchConfig::from_json(mistral, "m").attention.any_sliding());
  mistral["sliding_window"] = 5;
  mistral["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK(error_of(mistral).find("not supported for mistral") != std::string::npos);
  mistral.erase("layer_types");
  mistral["attention_bias"] = true;
  CHECK(error_of(mistral).find("attention_bias = true is not supported for mistral") != std::string::npos);
  CHECK(ModelArchConfig::from_json(config_of("mistral-window"), "m").to_json()["architectures"][0] == "MistralForCausalLM");
}

TEST_CASE("unsupported RoPE and window settings are one-line InputErrors naming the key and value") {
  auto llama = config_of("llama-llama3");
  auto expect = [](const nlohmann::json& j, const std::string& fragment) {
    const std::string message = error_of(j);
    INFO(message);
    CHECK(message.find("x/config.json: ") == 0);
    CHECK(message.find(fragment) != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
  };
  auto j = llama;
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  expect(j, "rope_parameters.rope_type = \"longrope\" is not supported");
  j = llama;
  j.erase("rope_parameters");
  j["rope_scaling"] = {{"type", "su"}, {"factor", 2.0}};
  expect(j, "rope_scaling.type = \"su\" is not supported");
  j = llama;
  j["rope_parameters"]["partial_rotary_factor"] = 0.5;
  expect(j, "partial_rotary_factor = 0.5 is not supported");
  j = llama;
  j["partial_rotary_factor"] = 0.5;
  expect(j, "partial_rotary_factor = 0.5 is not supported");
  j = llama;
  j["rope_parameters"].erase("low_freq_factor");
  expect(j, "rope_parameters.low_freq_factor is required");
  j = llama;
  j["rope_parameters"]["warp"] = 1.0;
  expect(j, "rope_parameters.warp is not a RoPE parameter");
  j = llama;
  j["rope_parameters"] = {{"rope_type", "linear"}};
  expect(j, "rope_parameters.factor is required");
  j = llama;
  j["use_sliding_window"] = true;
  expect(j, "use_sliding_window = true is not supported for llama");
}
