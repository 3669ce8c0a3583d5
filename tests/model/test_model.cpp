#include <catch2/catch.hpp>

#include "helpers.h"
#include "rayless/base/cpu_features.h"
#include "rayless/base/error.h"
#include "rayless/grpo/completion_logprobs.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/safetensors.h"
#include "rayless/ops/autocast_scope.h"
#include "rayless/ops/ops.h"

#include <optional>
#include <string>
#include <utility>

using namespace rayless;
using namespace rayless::ops;

namespace {
// the projections' linear where it takes its autocast path (ops::linear), which the caller requires
torch::Tensor autocast_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  REQUIRE(autocast_linear_applies(x, weight));
  return ops::linear(x, weight, bias);
}

// max |a - b| over the real (mask = 1) positions of [B, T, V] logits
double masked_max_error(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto keep = mask.to(torch::kBool).unsqueeze(-1).expand_as(a);
  return (a - b).abs().masked_select(keep).max().item<double>();
}

// the share of the real positions' logits where a and b are equal
double masked_equal_share(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto keep = mask.to(torch::kBool).unsqueeze(-1).expand_as(a);
  return a.eq(b).masked_select(keep).to(torch::kFloat64).mean().item<double>();
}

// The bfloat16 fixtures come from a CPU with bfloat16 matrix units (AMX). Without such units oneDNN
// emulates the products in float32 and rounds them differently, by the operands' layout too:
// transformers' own log-probs for a row run alone and in the padded batch differ by up to 0.016 there
// (AMD EPYC, AVX2, 2026-12-04; docs/models.md). There the comparisons allow bfloat16's rounding
// instead of asking for the fixture's own bits.
bool cpu_like_the_fixtures() {
  static bool warned = false;
  if (!cpu_has_bfloat16_units() && !std::exchange(warned, true))
    WARN("no bfloat16 matrix units on this CPU: bfloat16 fixtures compared to bfloat16 rounding");
  return cpu_has_bfloat16_units();
}

// Both settings of train.bf16_products: the golden tests hold for each.
constexpr BFloat16Products kAllProducts[] = {BFloat16Products::bfloat16, BFloat16Products::float32};
// The fixtures' exact limits apply to LibTorch's own bfloat16 products on a CPU like the fixtures';
// widened products, like emulated ones, round their float32 sums in another order.
bool exact_limits(BFloat16Products products) {
  return products == BFloat16Products::bfloat16 && cpu_like_the_fixtures();
}

ModelArchConfig tiny_config() { return load_model_config(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny"); }

// Each tensor of `actual` equals the same one of `expected` bit for bit (dtype included); `names`
// says which tensor is which in a failure.
void check_bitwise_equal(const std::vector<torch::Tensor>& actual, const std::vector<torch::Tensor>& expected,
                         const std::string& names) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("tensor " << i << " of " << names);
    CHECK(actual[i].scalar_type() == expected[i].scalar_type());
    CHECK(torch::equal(actual[i], expected[i]));
  }
}
}  // namespace

TEST_CASE("golden: logits of a left-padded batch match transformers (fp32)") {
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    model->eval();
    const auto expected_json = test::read_json(test::golden_dir() / (name + "-expected.json"));
    auto expected = load_safetensors(test::golden_dir() / (name + "-expected.safetensors"));
    auto ids = test::ids_tensor(expected_json["input_ids"]);
    auto mask = test::ids_tensor(expected_json["attention_mask"]);
    torch::NoGradGuard no_grad;
    // positions from the mask (what generation uses)
    auto logits = model->forward(ids, mask);
    const double error = masked_max_error(logits, expected.at("logits"), mask);
    CHECK(error <= 1e-4);
    // positions 0..T-1 (a plain transformers forward without position_ids)
    auto arange = torch::arange(ids.size(1), torch::kLong).unsqueeze(0).expand_as(ids);
    auto logits_default = model->logits(model->forward_hidden(ids, mask, arange));
    CHECK(masked_max_error(logits_default, expected.at("logits_default_positions"), mask) <= 1e-4);
    // RoPE only sees position differences, so shifting a left-padded row's positions by its padding
    // changes nothing beyond rounding: both conventions give the same logits on real tokens
    CHECK(masked_max_error(logits_default, expected.at("logits"), mask) <= 1e-4);
  }
}

// train.bf16 runs forward passes and generation under bfloat16 autocast, as TRL's bf16 = True does;
// the fixture is transformers' forward under torch's CPU autocast (tools/make_autocast_golden.py). The
// full forward, and the KV-cached decode on fused bfloat16 weights with a bfloat16 cache (what the
// trainer generates with), must both give transformers' logits to within bfloat16 rounding, which is
// far closer than the float32 logits are.
TEST_CASE("golden: logits under bfloat16 autocast match transformers, full forward and fused decode") {
  const auto expected_all = load_safetensors(test::golden_dir() / "autocast-bf16-expected.safetensors");
  for (const auto products : kAllProducts)
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name << ", train.bf16_products = " << to_string(products));
    const BFloat16ProductsScope products_scope(products);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    model->eval();
    const auto expected_json = test::read_json(test::golden_dir() / (name + "-expected.json"));
    const auto& expected = expected_all.at(name);
    auto ids = test::ids_tensor(expected_json["input_ids"]);
    auto mask = test::ids_tensor(expected_json["attention_mask"]);
    torch::NoGradGuard no_grad;
    const auto float32_logits = model->forward(ids, mask);
    const AutocastScope autocast(true, torch::kCPU);
    const auto full = model->forward(ids, mask).to(torch::kFloat32);
    // prefill the first 9 tokens (every row holds a real one by then), then one token per step
    const int64_t prefill = 9;
    FusedGenerationWeights fused(model);
    const auto& attention = *model->model->layers->ptr<DecoderLayerImpl>(0)->self_attn;
    CHECK(attention.generation_qkv.compute_dtype() == torch::kBFloat16);
    // where the CPU has AMX the products whose shapes fit the tiles run on rayless's tile kernel
    // (amx_linear): o_proj in all three models, q/k/v in qwen2 (with biases) and llama (128
    // outputs; qwen3's 144 do not fill 64-output blocks and stay on oneDNN's)
    // (widened products stay off them: they run in float32)
    const bool tiles = kernel_plan().on(Kernel::amx_linear) && products == BFloat16Products::bfloat16;
    CHECK((std::string(attention.generation_o.kernel()) == "amx_linear") == tiles);
    CHECK((std::string(attention.generation_qkv.kernel()) == "amx_linear") == (tiles && name != "qwen3"));
    KVCache cache;
    std::vector<torch::Tensor> steps{model->logits(model->forward_hidden(ids.narrow(1, 0, prefill), mask.narrow(1, 0, prefill), {}, &cache))};
    for (int64_t t = prefill; t < ids.size(1); ++t)
      steps.push_back(model->logits(model->forward_hidden(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), {}, &cache)));
    const auto decoded = torch::cat(steps, 1).to(torch::kFloat32);
    CHECK(cache.keys[0].scalar_type() == torch::kBFloat16);  // cast once per token, not per step
    const double full_error = masked_max_error(full, expected, mask);
    const double decode_error = masked_max_error(decoded, expected, mask);
    const double float32_error = masked_max_error(float32_logits, expected, mask);
    // bfloat16 logits land on the fixture's own values; float32 ones hardly ever do
    const double full_equal = masked_equal_share(full, expected, mask);
    const double decode_equal = masked_equal_share(decoded, expected, mask);
    const double float32_equal = masked_equal_share(float32_logits, expected, mask);
    CAPTURE(full_error, decode_error, float32_error, full_equal, decode_equal, float32_equal);
    CHECK(full_equal >= 0.3);  // 0.53-0.60 measured without bfloat16 units
    CHECK(decode_equal >= 0.3);
    CHECK(float32_equal <= 0.01);
    if (exact_limits(products)) {
      CHECK(full_error <= 5e-3);  // float32 logits are 0.02-0.03 away
      CHECK(decode_error <= 5e-3);
      CHECK(float32_error > 4 * std::max(full_error, decode_error));  // the fixture tells bfloat16 from float32
    } else {
      CHECK(full_error <= 1.0 / 64);  // one bfloat16 step at these logits' magnitudes (below 4)
      CHECK(decode_error <= 1.0 / 64);
    }
  }
}

namespace {
// The golden batch (<name>-expected.json) laid out as the trainer's packed pass takes it: each row's
// first 3 real tokens are its prompt and the rest its completion (1 to 9 tokens).
struct GoldenCompletions {
  std::vector<std::vector<int64_t>> prompts;
  torch::Tensor ids, mask;  // [B, T], completions left-aligned
  torch::Tensor ids_full, mask_full;  // the fixture's left-padded rows
};
GoldenCompletions golden_completions(const std::string& name) {
  const auto expected_json = test::read_json(test::golden_dir() / (name + "-expected.json"));
  GoldenCompletions g;
  g.ids_full = test::ids_tensor(expected_json["input_ids"]);
  g.mask_full = test::ids_tensor(expected_json["attention_mask"]);
  const int64_t B = g.ids_full.size(0), T = g.ids_full.size(1), prompt_tokens = 3;
  g.ids = torch::zeros({B, T}, torch::kLong);
  g.mask = torch::zeros({B, T}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t first = T - g.mask_full[b].sum().item<int64_t>();  // rows are left-padded
    std::vector<int64_t> prompt;
    for (int64_t t = first; t < first + prompt_tokens; ++t) prompt.push_back(g.ids_full[b][t].item<int64_t>());
    g.prompts.push_back(prompt);
    for (int64_t t = first + prompt_tokens; t < T; ++t) {
      g.ids[b][t - first - prompt_tokens] = g.ids_full[b][t].item<int64_t>();
      g.mask[b][t - first - prompt_tokens] = 1;
    }
  }
  return g;
}
}  // namespace

// The packed training pass under bfloat16 autocast (prompts run once, completions attended in length
// buckets, autocast_linear's projections, the fused LM head) against the same fixture. The log-probs
// must be the log-softmax of transformers' autocast logits to float32 rounding (measured 2e-7), not
// merely to bfloat16's (8e-3 when short buckets were attended in float32, docs/notes/bench-levers.md):
// train.bf16 computes what TRL's autocast computes.
TEST_CASE("golden: the packed training pass under bfloat16 autocast gives transformers' log-probs") {
  const auto expected_all = load_safetensors(test::golden_dir() / "autocast-bf16-expected.safetensors");
  for (const auto products : kAllProducts)
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name << ", train.bf16_products = " << to_string(products));
    const BFloat16ProductsScope products_scope(products);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    const GoldenCompletions g = golden_completions(name);
    const auto reference = torch::log_softmax(expected_all.at(name).to(torch::kFloat64), -1);
    const int64_t B = g.ids.size(0), T = g.ids.size(1);
    auto expected = torch::zeros({B, T}, torch::kFloat64);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t first = T - g.mask_full[b].sum().item<int64_t>();
      for (int64_t j = 0; j < g.mask[b].sum().item<int64_t>(); ++j) {
        const int64_t t = first + 3 + j;
        expected[b][j] = reference[b][t - 1][g.ids_full[b][t].item<int64_t>()];  // the logits at t - 1 score token t
      }
    }
    CompletionLogprobOptions options;  // packed; positions from each row's first real token, as the fixture
    const auto error_of = [&](bool autocast_on) {
      const AutocastScope autocast(autocast_on, torch::kCPU);
      const auto logps = completion_logprobs(model, g.prompts, g.ids, g.mask, options).logps;
      REQUIRE(logps.requires_grad());  // a training pass: autocast_linear's projections
      return ((logps.detach().to(torch::kFloat64) - expected).abs() * g.mask).max().item<double>();
    };
    const double bfloat16_error = error_of(true), float32_error = error_of(false);
    CAPTURE(bfloat16_error, float32_error);
    if (exact_limits(products)) {
      CHECK(bfloat16_error <= 1e-5);
      CHECK(float32_error > 1e-3);  // the fixture tells bfloat16 from float32
    } else {
      CHECK(bfloat16_error <= 0.02);  // transformers' own spread between layouts there: 0.012-0.016
    }
  }
}

// The backward of that pass, end to end: the gradients of the summed completion log-probs with respect
// to every parameter, against transformers' in float64 (the exact ones) and under autocast (what TRL's
// backward computes; tools/make_autocast_golden.py). rayless's backward differs from autograd's in
// places (autocast_linear, silu_times, attention's backward in float32), so the bits differ; each
// parameter's gradient must be as near the exact one as transformers' autocast gradient is, within
// a margin for the different rounding (the largest ratio measured was 1.3), and far nearer than the
// float32 gradients of a wrong pass would be.
TEST_CASE("golden: gradients of the packed training pass under bfloat16 autocast are as near exact as transformers'") {
  const auto golden = load_safetensors(test::golden_dir() / "autocast-bf16-grads.safetensors");
  for (const auto products : kAllProducts)
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name << ", train.bf16_products = " << to_string(products));
    const BFloat16ProductsScope products_scope(products);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    const GoldenCompletions g = golden_completions(name);
    {
      const AutocastScope autocast(true, torch::kCPU);
      const auto logps = completion_logprobs(model, g.prompts, g.ids, g.mask, CompletionLogprobOptions{}).logps;
      (logps * g.mask).sum().backward();
    }
    int64_t compared = 0;
    double worst_ratio = 0;
    for (const auto& item : model->named_parameters()) {
      const auto exact = golden.at(name + "/float64/" + item.key()).to(torch::kFloat64);
      const auto theirs = golden.at(name + "/autocast/" + item.key()).to(torch::kFloat64);
      REQUIRE(item.value().grad().defined());
      const auto ours = item.value().grad().to(torch::kFloat64);
      const double scale = exact.abs().max().item<double>();
      const double our_error = (ours - exact).abs().max().item<double>() / scale;
      const double their_error = (theirs - exact).abs().max().item<double>() / scale;
      INFO(item.key() << ": relative error " << our_error << ", transformers' autocast " << their_error);
      CHECK(our_error <= 1.6 * their_error + 1e-6);
      CHECK(our_error <= 0.05);
      worst_ratio = std::max(worst_ratio, our_error / their_error);
      ++compared;
    }
    int64_t in_fixture = 0;
    for (const auto& entry : golden) in_fixture += entry.first.rfind(name + "/float64/", 0) == 0;
    CHECK(compared == in_fixture);  // every parameter the fixture has a gradient for
    WARN(name << ": worst ratio of rayless's gradient error to transformers' " << worst_ratio);
  }
}

TEST_CASE("KV-cached incremental forward equals the full forward") {
  CausalLM model(tiny_config());
  model->init_weights(7);
  model->eval();
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(0, 256, {2, 9}, torch::kLong);
  auto mask = torch::ones({2, 9}, torch::kLong);
  mask.narrow(1, 0, 3)[1].fill_(0);  // row 1 is left-padded by 3
  auto full = model->forward(ids, mask);
  KVCache cache;
  auto first = model->logits(model->forward_hidden(ids.narrow(1, 0, 5), mask.narrow(1, 0, 5), {}, &cache));
  std::vector<torch::Tensor> steps{first};
  for (int64_t t = 5; t < 9; ++t)
    steps.push_back(model->logits(model->forward_hidden(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), {}, &cache)));
  auto incremental = torch::cat(steps, 1);
  CHECK(cache.length == 9);
  CHECK(masked_max_error(incremental, full, mask) < 1e-5);
}

// forward_hidden's header promises that a cache filled with grad enabled carries gradients back to
// the pass that filled it: a prompt pass, then the completion's pass on that cache, must give the
// full pass's gradients.
TEST_CASE("a KV cache filled with grad enabled carries gradients back to the pass that filled it") {
  const auto gradients = [](bool two_passes) {
    CausalLM model(tiny_config());
    model->init_weights(5);
    model->train();
    torch::manual_seed(0);
    auto ids = torch::randint(0, 256, {2, 7}, torch::kLong);
    auto mask = torch::ones({2, 7}, torch::kLong);
    mask.narrow(1, 0, 2)[0].fill_(0);  // row 0 is left-padded by 2
    torch::Tensor logits;
    if (two_passes) {
      KVCache cache;
      model->forward_hidden(ids.narrow(1, 0, 4), mask.narrow(1, 0, 4), {}, &cache);
      logits = model->logits(model->forward_hidden(ids.narrow(1, 4, 3), mask, {}, &cache));
    } else {
      logits = model->forward(ids, mask).narrow(1, 4, 3);
    }
    logits.log_softmax(-1).select(-1, 3).sum().backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  const auto full = gradients(false), two_passes = gradients(true);
  REQUIRE(full.size() == two_passes.size());
  // float rounding only (the two orders of summation differ by about 1e-6 of the largest entry); a
  // cache that cut the graph loses the prompt tokens' share of every layer's gradient
  for (size_t i = 0; i < full.size(); ++i)
    CHECK((full[i] - two_passes[i]).abs().max().item<double>() <= 1e-5 * full[i].abs().max().item<double>() + 1e-7);
}

namespace {
// One forward and backward of the tiny model, with or without checkpointing; under autocast the
// forward runs in an AutocastScope and backward after it has closed, as in the trainer.
std::pair<double, std::vector<torch::Tensor>> checkpointing_run(bool checkpoint, bool autocast_on) {
  CausalLM model(tiny_config());
  model->init_weights(3);
  model->train();
  model->set_gradient_checkpointing(checkpoint);
  torch::manual_seed(0);
  auto ids = torch::randint(0, 256, {2, 6}, torch::kLong);
  auto mask = torch::ones({2, 6}, torch::kLong);
  mask[0][0] = 0;
  torch::Tensor loss;
  {
    AutocastScope autocast(autocast_on, torch::kCPU);
    loss = model->forward(ids, mask).to(torch::kFloat32).log_softmax(-1).select(-1, 5).sum();
  }
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return {loss.item<double>(), grads};
}
}  // namespace

TEST_CASE("gradient checkpointing gives the same gradients") {
  auto [loss_plain, grads_plain] = checkpointing_run(false, false);
  auto [loss_ckpt, grads_ckpt] = checkpointing_run(true, false);
  CHECK(loss_plain == Approx(loss_ckpt).epsilon(1e-6));
  REQUIRE(grads_plain.size() == grads_ckpt.size());
  for (size_t i = 0; i < grads_plain.size(); ++i) CHECK(torch::allclose(grads_plain[i], grads_ckpt[i], 1e-5, 1e-7));
}

// train.bf16 with gradient checkpointing (TRL's defaults: bf16 and gradient_checkpointing on): the
// forward runs under autocast and backward after the autocast scope has closed, as in the trainer, so
// the recomputation must run under the autocast the forward had (torch.utils.checkpoint, which TRL
// uses, restores it too). Then the gradients are the ones without checkpointing, bit for bit.
TEST_CASE("gradient checkpointing under bfloat16 autocast recomputes under autocast: the same gradients") {
  auto [loss_plain, grads_plain] = checkpointing_run(false, true);
  auto [loss_ckpt, grads_ckpt] = checkpointing_run(true, true);
  CHECK(loss_plain == loss_ckpt);
  REQUIRE(grads_plain.size() == grads_ckpt.size());
  for (size_t i = 0; i < grads_plain.size(); ++i) {
    INFO("parameter " << i << ": largest difference " << (grads_plain[i] - grads_ckpt[i]).abs().max().item<double>());
    CHECK(torch::equal(grads_plain[i], grads_ckpt[i]));
  }
}

TEST_CASE("parameter names are the HF state dict names") {
  CausalLM model(load_model_config(test::golden_dir() / "llama"));
  auto names = model->named_parameters().keys();
  auto header_names = load_safetensors_directory(test::golden_dir() / "llama");
  REQUIRE(names.size() == header_names.size());
  for (const auto& n : names) CHECK(header_names.count(n) == 1);
  CausalLM tied(tiny_config());
  CHECK(tied->lm_head_weight().data_ptr() == tied->model->embed_tokens->weight.data_ptr());
  CHECK(tied->config().num_parameters() == static_cast<int64_t>([&] {
          int64_t n = 0;
          for (auto& p : tied->parameters()) n += p.numel();
          return n;
        }()));
  CHECK(tied->config().num_parameters() > 1000000);
  CHECK(tied->config().num_parameters() < 5000000);
}

TEST_CASE("config.json errors are one-line InputErrors naming the field") {
  auto base = test::read_json(test::golden_dir() / "qwen2/config.json");
  auto expect_error = [&](nlohmann::json j, const std::string& fragment) {
    try {
      ModelArchConfig::from_json(j, "x/config.json");
      FAIL("accepted: " << fragment);
    } catch (const InputError& e) {
      const std::string message = e.what();
      INFO(message);
      CHECK(message.find("x/config.json") != std::string::npos);
      CHECK(message.find(fragment) != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  };
  auto j = base;
  j["model_type"] = "gpt_neox";
  expect_error(j, "gpt_neox");
  j = base;
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 4.0}};
  expect_error(j, "rope_scaling.rope_type = \"longrope\" is not supported");
  j = base;
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 10000.0}};
  expect_error(j, "llama3");
  j = base;
  j["moe_experts"] = 8;
  expect_error(j, "moe_experts");
  j = base;
  j["hidden_act"] = "gelu";
  expect_error(j, "gelu");
  j = base;
  j["num_key_value_heads"] = 3;
  expect_error(j, "num_key_value_heads");
  j = base;
  j.erase("hidden_size");
  expect_error(j, "hidden_size");
  j = base;
  j["layer_types"] = {"full_attention", "sliding_attention"};  // a sliding layer needs use_sliding_window
  expect_error(j, "layer_types");
}

TEST_CASE("save_hf_directory round trip, and a missing tensor is an InputError") {
  auto dir = test::scratch_dir("save-roundtrip");
  CausalLM model = load_hf_model(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny", torch::kFloat32,
                                 torch::kCPU, 99);
  auto tok = load_tokenizer("", std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny");
  save_hf_directory(model, tok.get(), dir / "saved");
  CHECK_THROWS(save_hf_directory(model, tok.get(), dir / "saved"));  // never over an existing directory
  for (const char* f : {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"})
    CHECK(std::filesystem::exists(dir / "saved" / f));
  CausalLM loaded = load_hf_model(dir / "saved");
  auto ids = torch::tensor({{72, 105, 33, 10}}, torch::kLong);
  torch::NoGradGuard no_grad;
  auto expected = model->forward(ids);
  CHECK(torch::equal(loaded->forward(ids), expected));
  // the same seed gives the same weights; another seed does not
  CausalLM again = load_hf_model(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny", torch::kFloat32, torch::kCPU, 99);
  CHECK(torch::equal(again->forward(ids), expected));
  CausalLM other = load_hf_model(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny", torch::kFloat32, torch::kCPU, 100);
  CHECK_FALSE(torch::equal(other->forward(ids), expected));
  // logits next to the directory, for tools/check_roundtrip.py
  save_safetensors(dir / "saved-logits.safetensors", {{"logits", expected}, {"input_ids", ids.to(torch::kFloat32)}});

  // drop one tensor: loading names it
  auto state = load_safetensors(dir / "saved" / "model.safetensors");
  std::vector<std::pair<std::string, torch::Tensor>> partial;
  for (auto& [k, v] : state)
    if (k != "model.layers.1.mlp.up_proj.weight") partial.emplace_back(k, v);
  std::filesystem::copy(dir / "saved", dir / "broken");
  save_safetensors(dir / "broken" / "model.safetensors", partial);
  try {
    load_hf_model(dir / "broken");
    FAIL("missing tensor accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("model.layers.1.mlp.up_proj.weight") != std::string::npos);
  }
  // a mis-shaped tensor
  partial.emplace_back("model.layers.1.mlp.up_proj.weight", torch::zeros({3, 3}));
  save_safetensors(dir / "broken" / "model.safetensors", partial);
  CHECK_THROWS_AS(load_hf_model(dir / "broken"), InputError);
}

TEST_CASE("bfloat16 forward stays close to float32") {
  CausalLM model = load_hf_model(test::golden_dir() / "qwen2");
  CausalLM half = load_hf_model(test::golden_dir() / "qwen2", torch::kBFloat16);
  CHECK(half->dtype() == torch::kBFloat16);
  auto ids = torch::randint(0, 600, {2, 8}, torch::kLong);
  torch::NoGradGuard no_grad;
  auto a = model->forward(ids);
  auto b = half->forward(ids).to(torch::kFloat32);
  CHECK((a - b).abs().max().item<double>() < 0.05 * a.abs().max().item<double>() + 0.05);
}

// Generation runs the layers on fused (and, with oneDNN, packed) copies of the weights; the logits
// must equal the separate projections' up to float rounding, on the packed path (>= 4 rows), the
// path that falls back to the separate parts (< 4 rows) and the prefill (many rows).
TEST_CASE("fused decoding weights give the separate projections' logits") {
  CausalLM model(tiny_config());
  model->init_weights(11);
  model->eval();
  torch::NoGradGuard no_grad;
  for (int64_t rows : {2, 8}) {
    auto ids = torch::randint(0, 256, {rows, 7}, torch::kLong);
    auto mask = torch::ones({rows, 7}, torch::kLong);
    mask.narrow(1, 0, 2)[0].fill_(0);  // row 0 is left-padded by 2
    auto decode = [&](bool fuse) {
      std::optional<FusedGenerationWeights> fused;
      if (fuse) fused.emplace(model);
      KVCache cache;
      std::vector<torch::Tensor> steps{model->logits(model->forward_hidden(ids.narrow(1, 0, 4), mask.narrow(1, 0, 4), {}, &cache))};
      for (int64_t t = 4; t < 7; ++t)
        steps.push_back(model->logits(model->forward_hidden(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), {}, &cache)));
      return torch::cat(steps, 1);
    };
    const auto separate = decode(false), fused = decode(true);
    CAPTURE(rows);
    CHECK(masked_max_error(fused, separate, mask) < 1e-5);
  }
  // the copies are gone once the guard is: a later pass uses the (updated) parameters
  { FusedGenerationWeights fused(model); }
  CHECK_FALSE(model->model->layers->ptr<DecoderLayerImpl>(0)->self_attn->generation_qkv.defined());
}

// The MLP's down projection recomputes its input, silu(gate) * up, in backward instead of keeping it:
// its output and every gradient (the MLP's input, gate, up and down weights) must be those of
// down_proj(silu_times(gate, up)) bit for bit, in float32 and float64 and under bfloat16 autocast.
TEST_CASE("silu_times_down gives down_proj(silu_times(gate, up)) bit for bit") {
  const ModelArchConfig config = tiny_config();
  struct Setting {
    torch::Dtype dtype;
    bool autocast_on;
    BFloat16Products products;
  };
  for (const Setting& setting : {Setting{torch::kFloat32, false, BFloat16Products::bfloat16},
                                 Setting{torch::kFloat64, false, BFloat16Products::bfloat16},
                                 Setting{torch::kFloat32, true, BFloat16Products::bfloat16},
                                 Setting{torch::kFloat32, true, BFloat16Products::float32}}) {
    // copies, not structured bindings: C++17 lambdas cannot capture those (clang refuses)
    const torch::Dtype dtype = setting.dtype;
    const bool autocast_on = setting.autocast_on;
    INFO(dtype << (autocast_on ? " under bfloat16 autocast" : "") << ", products " << to_string(setting.products));
    const BFloat16ProductsScope products(setting.products);
    torch::manual_seed(3);
    MLP mlp(config);
    mlp->to(dtype);
    auto leaf = torch::randn({2, 9, config.hidden_size}, dtype).requires_grad_(true);
    auto weight = torch::randn({2, 9, config.hidden_size}, dtype);
    auto run = [&](bool recomputed) {
      torch::Tensor out;
      {
        AutocastScope autocast(autocast_on, torch::kCPU);
        auto x = leaf * 1.0;
        auto gate = mlp->gate_proj(x);
        auto up = mlp->up_proj(x);
        out = recomputed ? silu_times_down(gate, up, mlp->down_proj) : mlp->down_proj(silu_times(gate, up));
        REQUIRE(out.defined());
      }
      auto grads = torch::autograd::grad({(out.to(dtype) * weight).sum()},
                                         {leaf, mlp->gate_proj->weight, mlp->up_proj->weight, mlp->down_proj->weight});
      grads.insert(grads.begin(), out.detach());
      return grads;
    };
    check_bitwise_equal(run(true), run(false), "(output, input grad, gate, up, down weight grads)");
  }
}

// autocast_linear keeps the float32 weight for backward instead of autocast's bfloat16 copy; its
// output and its input's and bias's gradients must equal autocast's torch::linear bit for bit, for the
// inputs the model gives it: 2 and 3 dimensions, float32 or bfloat16, with and without a bias. The
// weight's gradient is the product of the gradient transposed in memory (linear_grads): exactly
// transposed(grad).mm(input), and as near the float64 product as autograd's grad.t().mm(input) (the
// two sum in float32 in different orders: elements near zero may differ by many bfloat16 steps).
TEST_CASE("autocast_linear gives autocast's linear bit for bit, the weight's gradient as near exact") {
  torch::manual_seed(7);
  struct Case {
    std::vector<int64_t> input_shape;
    int64_t out;
    bool bias;
    torch::Dtype input_dtype;
  };
  const std::vector<Case> cases{{{37, 64}, 48, true, torch::kFloat32},   {{37, 64}, 48, false, torch::kFloat32},
                                {{1, 29, 64}, 160, true, torch::kFloat32}, {{3, 11, 64}, 96, false, torch::kFloat32},
                                {{2, 13, 64}, 96, true, torch::kBFloat16}, {{1, 1, 64}, 16, true, torch::kFloat32},
                                {{1, 576, 1792}, 640, false, torch::kBFloat16}, {{576, 1792}, 640, false, torch::kBFloat16},
                                // a training pass's token count, where the two products' roundings differ
                                {{1474, 640}, 640, false, torch::kBFloat16}};
  for (const auto& c : cases) {
    INFO("input " << c.input_shape << ", " << c.out << " outputs, bias " << c.bias << ", " << c.input_dtype);
    const int64_t in = c.input_shape.back();
    auto weight = torch::randn({c.out, in}).div_(8).requires_grad_(true);
    auto bias = c.bias ? torch::randn({c.out}).requires_grad_(true) : torch::Tensor();
    auto x = torch::randn(c.input_shape).to(c.input_dtype).requires_grad_(true);
    // returns the output's gradient first, then the output, the input's, weight's and bias's gradients
    auto run = [&](bool lean) {
      AutocastScope autocast(true, torch::kCPU);
      REQUIRE(autocast_linear_applies(x, weight));
      auto y = lean ? autocast_linear(x, weight, bias) : torch::linear(x, weight, bias);
      // a downstream float32 use, as the residual stream's
      auto loss = (y.to(torch::kFloat32) * torch::randn(y.sizes(), torch::Generator(at::detail::createCPUGenerator(3)))).sum();
      std::vector<torch::Tensor> inputs{y, x, weight};
      if (c.bias) inputs.push_back(bias);
      auto grads = torch::autograd::grad({loss}, inputs);
      grads.insert(grads.begin() + 1, y.detach());
      return grads;
    };
    auto lean = run(true), plain = run(false);
    const torch::Tensor lean_weight_grad = lean[3], plain_weight_grad = plain[3];
    lean.erase(lean.begin() + 3);
    plain.erase(plain.begin() + 3);
    check_bitwise_equal(lean, plain, "(output's gradient, output, input grad, bias grad)");
    const auto grad_2d = lean[0].reshape({-1, c.out});
    const auto input_2d = x.detach().to(torch::kBFloat16).reshape({-1, in});
    CHECK(torch::equal(lean_weight_grad, transposed(grad_2d).mm(input_2d).to(torch::kFloat32)));
    const auto exact = grad_2d.to(torch::kFloat64).t().mm(input_2d.to(torch::kFloat64));
    const double lean_error = test::relative_l2_error(lean_weight_grad, exact);
    const double plain_error = test::relative_l2_error(plain_weight_grad, exact);
    INFO("weight gradient's error against float64: " << lean_error << ", autograd's " << plain_error);
    CHECK(lean_error <= 1.02 * plain_error);
  }
}

// With train.bf16_products = float32, autocast_linear's three products are the widened formulas
// (ops.h) bit for bit, and its gradients as near the exact ones as autocast's own.
TEST_CASE("autocast_linear with float32 products: the widened products bit for bit, gradients as near exact as autocast's") {
  torch::manual_seed(11);
  const auto f32 = torch::kFloat32, low = torch::kBFloat16;
  // sizes at which LibTorch's bfloat16 kernels sum in another order than float32's (on an AMD EPYC a
  // few elements of each product differ; at smaller sizes they agreed bit for bit there)
  const int64_t in = 640, out = 256;
  for (const bool with_bias : {false, true})
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{128, in}, std::vector<int64_t>{2, 64, in}}) {
    INFO("input " << shape << ", bias " << with_bias);
    auto weight = torch::randn({out, in}).div_(8).requires_grad_(true);
    auto bias = with_bias ? torch::randn({out}).requires_grad_(true) : torch::Tensor();
    auto x = torch::randn(shape).requires_grad_(true);
    auto downstream_shape = shape;
    downstream_shape.back() = out;
    const auto downstream = torch::randn(downstream_shape);
    auto run = [&](BFloat16Products products) {
      const BFloat16ProductsScope scope(products);
      AutocastScope autocast(true, torch::kCPU);
      auto y = autocast_linear(x, weight, bias);
      std::vector<torch::Tensor> inputs{x, weight};
      if (with_bias) inputs.push_back(bias);
      auto grads = torch::autograd::grad({(y.to(f32) * downstream).sum()}, inputs);
      grads.insert(grads.begin(), y.detach());
      return grads;
    };
    const auto widened = run(BFloat16Products::float32), native = run(BFloat16Products::bfloat16);
    // by hand: operands rounded to bfloat16, products in float32, one rounding
    const auto x_low = x.detach().to(low).reshape({-1, in}), w_low = weight.detach().to(low);
    const auto grad_low = downstream.to(low).reshape({-1, out});  // y.to(f32)'s backward casts it to bfloat16
    auto forward = torch::linear(x_low.to(f32), w_low.to(f32), with_bias ? bias.detach().to(low).to(f32) : torch::Tensor());
    CHECK(torch::equal(widened[0], forward.to(low).reshape(widened[0].sizes())));
    CHECK(torch::equal(widened[1], grad_low.to(f32).mm(w_low.to(f32)).to(low).to(f32).reshape(x.sizes())));
    CHECK(torch::equal(widened[2], grad_low.to(f32).t().mm(x_low.to(f32)).to(low).to(f32)));
    if (with_bias) CHECK(torch::equal(widened[3], native[3]));  // a sum, not a product: unchanged
    // as near the exact products (float64 on the same bfloat16 operands) as autocast's own kernels
    const auto exact_input = grad_low.to(torch::kFloat64).mm(w_low.to(torch::kFloat64)).reshape(x.sizes());
    const auto exact_weight = grad_low.to(torch::kFloat64).t().mm(x_low.to(torch::kFloat64));
    const double input_error = test::relative_l2_error(widened[1], exact_input);
    const double input_error_native = test::relative_l2_error(native[1], exact_input);
    const double weight_error = test::relative_l2_error(widened[2], exact_weight);
    const double weight_error_native = test::relative_l2_error(native[2], exact_weight);
    CAPTURE(input_error, input_error_native, weight_error, weight_error_native);
    CHECK(input_error <= 1.05 * input_error_native);
    CHECK(weight_error <= 1.05 * weight_error_native);
  }
}

// q, k and v (and gate and up) project one input: autocast casts it for each projection, autocast_linear
// once. The input's gradient (the float32 sum of the projections' own) must be the same bit for bit;
// the weights' are checked by the test above.
TEST_CASE("autocast_linear: projections of one input share its cast, with autocast's input gradient bit for bit") {
  torch::manual_seed(5);
  std::vector<torch::Tensor> weights, biases;
  for (int64_t out : {96, 32, 32}) {
    weights.push_back(torch::randn({out, 64}).div_(8).requires_grad_(true));
    biases.push_back(torch::randn({out}).requires_grad_(true));
  }
  auto leaf = torch::randn({1, 41, 64}).requires_grad_(true);
  auto run = [&](bool lean) {
    torch::Tensor loss = torch::zeros({});
    {
      AutocastScope autocast(true, torch::kCPU);
      auto x = leaf * 1.5;  // not a leaf, as the normed hidden state
      for (size_t i = 0; i < weights.size(); ++i) {
        auto y = lean ? autocast_linear(x, weights[i], biases[i]) : torch::linear(x, weights[i], biases[i]);
        loss = loss + (y.to(torch::kFloat32) * torch::randn(y.sizes(), torch::Generator(at::detail::createCPUGenerator(i)))).sum();
      }
    }
    std::vector<torch::Tensor> inputs{leaf};
    inputs.insert(inputs.end(), biases.begin(), biases.end());
    inputs.insert(inputs.end(), weights.begin(), weights.end());
    auto grads = torch::autograd::grad({loss}, inputs);
    grads.resize(1 + biases.size());  // the input's and biases' gradients
    return grads;
  };
  check_bitwise_equal(run(true), run(false), "(input, 3 bias gradients)");
}

// What backward holds: autograd's linear under autocast keeps a bfloat16 copy of the weight (so the
// float32 weight may change before backward without notice); autocast_linear keeps the float32 weight
// itself, which autograd's version check then guards.
TEST_CASE("autocast_linear: backward holds the float32 weight, not a bfloat16 copy") {
  auto weight = torch::randn({256, 128}).requires_grad_(true);
  auto x = torch::randn({4, 128});
  auto forward_then_change_weight = [&](bool lean) {
    torch::Tensor y;
    {
      AutocastScope autocast(true, torch::kCPU);
      y = lean ? autocast_linear(x, weight, torch::Tensor()) : torch::linear(x, weight);
    }
    auto loss = y.to(torch::kFloat32).sum();
    torch::NoGradGuard no_grad;
    weight.add_(1.0);
    return loss;
  };
  auto plain = forward_then_change_weight(false);
  CHECK_NOTHROW(plain.backward());  // its own copy, unchanged
  auto lean = forward_then_change_weight(true);
  CHECK_THROWS_WITH(lean.backward(), Catch::Contains("modified by an inplace operation"));
}

// The MLP's activation keeps fewer tensors for backward than autograd's silu and mul, with autograd's
// own backward arithmetic: values and gradients must be bit-for-bit equal, in float32 and float64.
TEST_CASE("silu_times gives autograd's value and gradients bit for bit") {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto gate = torch::randn({5, 7, 33}, dtype).mul_(3).requires_grad_(true);
    auto up = torch::randn({5, 7, 33}, dtype).requires_grad_(true);
    auto weight = torch::randn({5, 7, 33}, dtype);
    auto lean = silu_times(gate, up);
    auto [lean_gate, lean_up] = [&] {
      auto g = torch::autograd::grad({(lean * weight).sum()}, {gate, up});
      return std::make_pair(g[0], g[1]);
    }();
    auto plain = torch::silu(gate) * up;
    auto g = torch::autograd::grad({(plain * weight).sum()}, {gate, up});
    CHECK(torch::equal(lean, plain));
    CHECK(torch::equal(lean_gate, g[0]));
    CHECK(torch::equal(lean_up, g[1]));
  }
}


// The packed layout runs a micro-batch in two forwards (the distinct prompts, then the completions),
// so each weight is used twice under one autocast scope. autograd's linear shares autocast's cached
// bfloat16 copy between the uses and sums their two bfloat16 weight gradients in bfloat16;
// autocast_linear returns each use's gradient in float32 and autograd sums them there. So its weight
// gradient is exactly the float32 sum of the two uses' own, and nearer the float64 gradient of the same
// bfloat16 operands.
TEST_CASE("autocast_linear: a weight used twice gets the float32 sum of the two uses' gradients") {
  torch::manual_seed(11);
  auto weight = torch::randn({384, 256}).div_(16).requires_grad_(true);
  auto x1 = torch::randn({63, 256});
  auto x2 = torch::randn({449, 256});
  auto r1 = torch::randn({63, 384});
  auto r2 = torch::randn({449, 384});
  auto weight_grad = [&](bool lean, const std::vector<std::pair<torch::Tensor, torch::Tensor>>& uses) {
    torch::Tensor loss = torch::zeros({});
    {
      AutocastScope autocast(true, torch::kCPU);
      for (const auto& [x, r] : uses) {
        auto input = x.requires_grad_(false) * 1.0;
        auto y = lean ? autocast_linear(input, weight, torch::Tensor()) : torch::linear(input, weight);
        loss = loss + (y.to(torch::kFloat32) * r).sum();
      }
    }
    return torch::autograd::grad({loss}, {weight})[0];
  };
  const auto lean = weight_grad(true, {{x1, r1}, {x2, r2}});
  const auto plain = weight_grad(false, {{x1, r1}, {x2, r2}});
  const auto first = weight_grad(true, {{x1, r1}});
  const auto second = weight_grad(true, {{x2, r2}});
  CHECK(torch::equal(lean, first + second));
  CHECK_FALSE(torch::equal(plain, lean));  // autocast's sum rounded to bfloat16 first
  auto bf16_operand = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat64); };
  const auto exact = bf16_operand(r1).t().mm(bf16_operand(x1)) + bf16_operand(r2).t().mm(bf16_operand(x2));
  const double lean_error = (lean.to(torch::kFloat64) - exact).norm().item<double>();
  const double plain_error = (plain.to(torch::kFloat64) - exact).norm().item<double>();
  INFO("error against float64: autocast_linear " << lean_error << ", autocast's linear " << plain_error);
  CHECK(lean_error < plain_error);
}

// forward_slots with several tokens per row (a prompt's prefill or a conversation's new turn on the
// slots' kept keys and values): each real token's hidden state is the full forward's at its position,
// with rows of unequal lengths padded in both steps, on full and sliding-window layers.
TEST_CASE("forward_slots with several tokens per row gives the full forward's hidden states") {
  for (const bool sliding : {false, true}) {
    INFO((sliding ? "sliding window 4 on layer 1" : "full attention"));
    nlohmann::json j = test::read_json(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny/config.json");
    if (sliding) j.update({{"use_sliding_window", true}, {"sliding_window", 4}, {"max_window_layers", 1}});
    const ModelArchConfig arch = ModelArchConfig::from_json(j, "config.json");
    CausalLM model(arch);
    model->init_weights(11);
    model->eval();
    torch::NoGradGuard no_grad;
    const std::vector<int64_t> before = {5, 2, 7}, added = {4, 1, 3};
    const int64_t B = 3, max_len = 16;
    torch::manual_seed(4);
    std::vector<torch::Tensor> rows;
    for (int64_t b = 0; b < B; ++b) rows.push_back(torch::randint(1, 200, {before[b] + added[b]}, torch::kLong));

    KVCache slots;
    for (int64_t l = 0; l < arch.num_hidden_layers; ++l) {
      slots.keys.push_back(torch::zeros({B, arch.num_key_value_heads, max_len, arch.head_dim}));
      slots.values.push_back(torch::zeros({B, arch.num_key_value_heads, max_len, arch.head_dim}));
    }
    slots.attend_length = max_len;
    // row b's tokens [first, first + count[b]) at their positions; padded rows repeat token 0 past their end
    const auto step = [&](const std::vector<int64_t>& first, const std::vector<int64_t>& count) {
      const int64_t T = *std::max_element(count.begin(), count.end());
      auto ids = torch::zeros({B, T}, torch::kLong), positions = torch::zeros({B, T}, torch::kLong);
      for (int64_t b = 0; b < B; ++b) {
        ids[b].narrow(0, 0, count[b]).copy_(rows[b].narrow(0, first[b], count[b]));
        positions[b].copy_(torch::arange(first[b], first[b] + T, torch::kLong).clamp_max(max_len - 1));
      }
      return model->forward_slots(ids, positions, slots);
    };
    const auto prefilled = step({0, 0, 0}, before);
    const auto continued = step(before, added);
    REQUIRE(continued.dim() == 3);
    for (int64_t b = 0; b < B; ++b) {
      INFO("row " << b);
      const auto full = model->forward_hidden(rows[b].unsqueeze(0), {}, {}).squeeze(0);
      CHECK((prefilled[b].narrow(0, 0, before[b]) - full.narrow(0, 0, before[b])).abs().max().item<double>() < 1e-5);
      CHECK((continued[b].narrow(0, 0, added[b]) - full.narrow(0, before[b], added[b])).abs().max().item<double>() < 1e-5);
    }
    // one token per row as [B] (the decode step's shape) and as [B, 1]: the same hidden states
    KVCache copy = slots;
    for (auto* tensors : {&copy.keys, &copy.values})
      for (auto& t : *tensors) t = t.clone();
    const auto next = torch::tensor({7, 8, 9}, torch::kLong);
    const auto at = torch::tensor({before[0] + added[0], before[1] + added[1], before[2] + added[2]}, torch::kLong);
    const auto flat = model->forward_slots(next, at, slots);
    const auto shaped = model->forward_slots(next.view({B, 1}), at.view({B, 1}), copy);
    CHECK(flat.dim() == 2);
    CHECK(torch::equal(flat, shaped.squeeze(1)));
  }
}
