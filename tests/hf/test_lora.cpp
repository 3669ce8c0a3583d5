// LoRA against PEFT itself (tests/data/lora-golden, made by tools/make_lora_golden.py with PEFT
// 0.21.2): adapters PEFT saved load here and give PEFT's logits with the adapter on, off, and merged.
// Float64 throughout; the base model alone differs from transformers by 3.1e-7 (transformers builds
// its RoPE tables in float32), so logits, and the adapter's own effect (on minus off), are compared
// within 1e-6: an adapter that is wrong anywhere moves the logits by more than 1e-3.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "model/helpers.h"
#include "rayless/base/error.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/peft_adapter.h"
#include "rayless/model/lora.h"
#include "rayless/hf/safetensors.h"

using namespace rayless;

namespace {
std::filesystem::path lora_dir() { return std::filesystem::path(RAYLESS_TEST_DATA) / "lora-golden"; }

CausalLM golden_base() { return load_hf_model(test::golden_dir() / "qwen2", torch::kFloat64); }

// largest difference over the real (unpadded) positions of the fixture's batch
double logits_difference(CausalLM& model, const std::map<std::string, torch::Tensor>& expected, const std::string& key) {
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor ids = expected.at("input_ids").to(torch::kLong), mask = expected.at("attention_mask").to(torch::kLong);
  const torch::Tensor logits = model->forward(ids, mask);
  const torch::Tensor real = mask.to(torch::kBool);
  return (logits.index({real}) - expected.at(key).index({real})).abs().max().item<double>();
}
// |(rayless on - rayless off) - (PEFT on - PEFT off)| over the real positions: the adapter's own effect
double adapter_effect_difference(CausalLM& model, const std::map<std::string, torch::Tensor>& expected,
                                 const std::string& name) {
  torch::NoGradGuard no_grad;
  model->eval();
  const torch::Tensor ids = expected.at("input_ids").to(torch::kLong), mask = expected.at("attention_mask").to(torch::kLong);
  const torch::Tensor on = model->forward(ids, mask);
  torch::Tensor off;
  {
    AdaptersDisabled base_only(model);
    off = model->forward(ids, mask);
  }
  const torch::Tensor real = mask.to(torch::kBool);
  const torch::Tensor peft_effect = expected.at(name + ".logits") - expected.at(name + ".base_logits");
  return ((on - off).index({real}) - peft_effect.index({real})).abs().max().item<double>();
}
}  // namespace

TEST_CASE("lora: a PEFT adapter gives PEFT's logits, on, off and merged") {
  const auto expected = load_safetensors(lora_dir() / "expected.safetensors");
  for (const std::string name : {"adapter-qvd", "adapter-all"}) {
    INFO(name);
    CausalLM model = golden_base();
    load_lora_adapter(model, lora_dir() / name);
    CHECK(logits_difference(model, expected, name + ".logits") < 1e-6);
    {
      AdaptersDisabled base_only(model);
      CHECK(logits_difference(model, expected, name + ".base_logits") < 1e-6);
    }
    CHECK(logits_difference(model, expected, name + ".logits") < 1e-6);  // back on
    CHECK(adapter_effect_difference(model, expected, name) < 1e-6);
    // the adapter changes the output (B was initialised randomly): the comparison above can fail
    CHECK((expected.at(name + ".logits") - expected.at(name + ".base_logits")).abs().max().item<double>() > 1e-3);
    merge_lora_adapters(model);
    CHECK(logits_difference(model, expected, name + ".merged_logits") < 1e-6);
    const torch::Tensor q0 = model->model->layers->ptr<DecoderLayerImpl>(0)->self_attn->q_proj->weight;
    CHECK((q0 - expected.at(name + ".merged_q_proj0")).abs().max().item<double>() < 1e-12);
    // the merged model's HF state holds no adapter tensors
    for (const auto& [key, tensor] : model->hf_state()) CHECK(key.find("lora_") == std::string::npos);
  }
}

TEST_CASE("lora: targets, frozen base, fresh adapters leave the output unchanged") {
  const auto expected = load_safetensors(lora_dir() / "expected.safetensors");
  CausalLM model = golden_base();
  LoraSettings settings;
  settings.r = 3;
  settings.alpha = 6;
  settings.target_modules = {"q_proj", "mlp.down_proj"};
  const auto adapted = add_lora_adapters(model, settings, 5);
  REQUIRE(adapted.size() == 4);  // 2 layers x (q_proj, down_proj)
  CHECK(adapted[0] == "model.layers.0.self_attn.q_proj");
  const auto trainable = trainable_parameters(*model);
  CHECK(trainable.size() == 8);  // lora_A and lora_B of each
  for (const auto& item : model->named_parameters(true))
    CHECK(item.value().requires_grad() == is_lora_parameter(item.key()));
  // B = 0 at the start: the adapted model is the base
  CHECK(logits_difference(model, expected, "adapter-qvd.base_logits") < 1e-6);
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor ids = expected.at("input_ids").to(torch::kLong), mask = expected.at("attention_mask").to(torch::kLong);
    const torch::Tensor adapted_logits = model->forward(ids, mask);
    AdaptersDisabled base_only(model);
    CHECK(torch::equal(adapted_logits, model->forward(ids, mask)));
  }

  CausalLM other = golden_base();
  settings.target_modules = {"qkv_proj"};
  CHECK_THROWS_WITH(add_lora_adapters(other, settings, 5),
                    Catch::Contains("lora.target_modules: \"qkv_proj\" matches no linear layer of this qwen2 model") &&
                        Catch::Contains("down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj"));
  settings.target_modules = {"all-linear"};
  settings.r = 0;
  CHECK_THROWS_WITH(add_lora_adapters(other, settings, 5), Catch::Contains("lora.r = 0 must be at least 1"));
  settings.r = 2;
  CHECK(add_lora_adapters(other, settings, 5).size() == 14);  // 7 linear layers x 2, never the head
}

TEST_CASE("lora: an adapter rayless writes reads back bit for bit, with PEFT's names and config") {
  const auto expected = load_safetensors(lora_dir() / "expected.safetensors");
  CausalLM model = golden_base();
  load_lora_adapter(model, lora_dir() / "adapter-qvd");
  const LoraSettings settings = read_lora_config(lora_dir() / "adapter-qvd");
  CHECK(settings.r == 4);
  CHECK(settings.alpha == 8);
  const auto dir = test::scratch_dir("lora-roundtrip");
  write_lora_adapter(model, settings, "tests/data/hf-golden/qwen2", dir / "adapter");
  const auto written = load_safetensors(dir / "adapter" / "adapter_model.safetensors");
  const auto original = load_safetensors(lora_dir() / "adapter-qvd" / "adapter_model.safetensors");
  REQUIRE(written.size() == original.size());
  for (const auto& [key, tensor] : original) {
    INFO(key);
    REQUIRE(written.count(key));
    CHECK(torch::equal(written.at(key), tensor));
  }
  const auto config = test::read_json(dir / "adapter" / "adapter_config.json");
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["r"] == 4);
  CHECK(config["target_modules"] == nlohmann::json({"down_proj", "q_proj", "v_proj"}));
  CausalLM again = golden_base();
  load_lora_adapter(again, dir / "adapter");
  CHECK(logits_difference(again, expected, "adapter-qvd.logits") < 1e-6);
  CHECK(adapter_effect_difference(again, expected, "adapter-qvd") < 1e-6);
}

TEST_CASE("lora: adapters that do not fit the model are refused naming the file") {
  CausalLM model = golden_base();
  LoraSettings settings;
  settings.target_modules = {"q_proj", "v_proj", "down_proj"};
  settings.r = 4;
  add_lora_adapters(model, settings, 1);
  // an adapter on every linear layer has tensors this model's adapters lack
  CHECK_THROWS_WITH(load_lora_adapter(model, lora_dir() / "adapter-all"),
                    Catch::Contains("adapter_model.safetensors: tensor") || Catch::Contains("unexpected tensor"));
  const auto dir = test::scratch_dir("lora-bad-config");
  std::filesystem::create_directories(dir / "a");
  test::write_bytes(dir / "a" / "adapter_config.json", R"({"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "use_dora": true})");
  CHECK_THROWS_WITH(read_lora_config(dir / "a"), Catch::Contains("adapter_config.json: use_dora = true is not supported"));
  test::write_bytes(dir / "a" / "adapter_config.json", R"({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]})");
  CHECK_THROWS_WITH(read_lora_config(dir / "a"), Catch::Contains("adapter_config.json: r must be an integer >= 1"));
  test::write_bytes(dir / "a" / "adapter_config.json", R"({"peft_type": "IA3"})");
  CHECK_THROWS_WITH(read_lora_config(dir / "a"), Catch::Contains("peft_type is \"IA3\""));
}

TEST_CASE("lora: gradient checkpointing gives the adapters the same gradients (base frozen)") {
  const auto expected = load_safetensors(lora_dir() / "expected.safetensors");
  const torch::Tensor ids = expected.at("input_ids").to(torch::kLong), mask = expected.at("attention_mask").to(torch::kLong);
  std::vector<std::vector<torch::Tensor>> grads;
  for (bool checkpointing : {false, true}) {
    CausalLM model = golden_base();
    load_lora_adapter(model, lora_dir() / "adapter-all");  // B != 0: every adapter tensor gets a gradient
    for (auto& p : model->parameters()) p.set_requires_grad(false);
    for (auto& item : model->named_parameters(true))
      if (is_lora_parameter(item.key())) item.value().set_requires_grad(true);
    model->train();
    model->set_gradient_checkpointing(checkpointing);
    const torch::Tensor logits = model->forward(ids, mask);
    (logits.square().mean()).backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : trainable_parameters(*model)) {
      REQUIRE(p.grad().defined());
      g.push_back(p.grad().clone());
    }
    for (const auto& p : model->parameters()) CHECK((p.requires_grad() || !p.grad().defined()));
    grads.push_back(g);
  }
  REQUIRE(grads[0].size() == 28);
  double worst = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    CHECK(grads[0][i].abs().max().item<double>() > 0);
    worst = std::max(worst, ((grads[0][i] - grads[1][i]).abs().max() / grads[0][i].abs().max()).item<double>());
  }
  CHECK(worst < 1e-12);
}
