// The CUDA backend's entries at their call sites, without a GPU: they are LibTorch compositions, so the
// whole model runs them on the CPU (ops::CpuRunsTable) against transformers' golden outputs and against
// the CPU's own backend. A kernel that matches its reference in test_<kernel>.cpp proves nothing about
// the shapes, layouts and dtypes the model hands it; these cases do.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>

#include "model/helpers.h"
#include "ops/backend.h"
#include "rayless/hf/model_directory.h"
#include "rayless/runtime/op_profile.h"
#include "rayless/sampler/sampler.h"

using namespace rayless;

TEST_CASE("cuda table on the CPU: greedy continuations of the golden models match transformers' generate") {
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name);
    CausalLM model = load_hf_model(test::golden_dir() / name);
    const auto expected = test::read_json(test::golden_dir() / (name + "-expected.json"));
    SamplingParams params;
    params.greedy = true;
    params.max_new_tokens = 12;
    params.eos_ids = {expected["eos_id"].get<int64_t>()};
    params.pad_id = expected["pad_id"].get<int64_t>();
    const ops::CpuRunsTable cuda_entries(ops::cuda_table());
    OpProfile profile{torch::Device(torch::kCPU)};
    const auto prompts = test::unpadded_rows(test::ids_tensor(expected["input_ids"]), test::ids_tensor(expected["attention_mask"]));
    const GenerationOutput out = generate(model, prompts, params, SamplingStream(0));
    const nlohmann::json ran = profile.stop(std::max<int64_t>(1, out.stats.decode_steps));
    CHECK(torch::equal(out.completion_ids, test::ids_tensor(expected["greedy_completion"])));
    // the decode steps' rotary ran as joint_rotary: two addcmul_ per layer and forward, and where q and k
    // are neighbours (the fused projection; not after qwen3's per-head norms) one view of both
    std::map<std::string, int64_t> calls;
    for (const auto& op : ran["top_level_operators"]) calls[op["name"].get<std::string>()] = op["calls"].get<int64_t>();
    const int64_t layers = model->config().num_hidden_layers;
    INFO("addcmul_ " << calls["aten::addcmul_"] << ", as_strided " << calls["aten::as_strided"] << ", " << layers << " layers");
    CHECK(calls["aten::addcmul_"] > 0);
    CHECK(calls["aten::addcmul_"] % (2 * layers) == 0);
    if (name == "qwen3") CHECK(calls["aten::as_strided"] == 0);
    else CHECK(2 * calls["aten::as_strided"] == calls["aten::addcmul_"]);
    CHECK(calls["aten::_fused_rms_norm"] > 0);
  }
}

TEST_CASE("cuda table on the CPU: a training pass's log-probs and gradients as the CPU backend's") {
  CausalLM model = load_hf_model(test::golden_dir() / "qwen2");  // 4 query heads over 2: the folded attention
  model->train();
  const auto expected = test::read_json(test::golden_dir() / "qwen2-expected.json");
  const auto ids = test::ids_tensor(expected["input_ids"]), mask = test::ids_tensor(expected["attention_mask"]);
  std::vector<torch::Tensor> grads[2];
  torch::Tensor logps[2];
  for (const bool cuda_entries : {true, false}) {
    std::optional<ops::CpuRunsTable> table;
    if (cuda_entries) table.emplace(ops::cuda_table());
    model->zero_grad();
    const auto logits = model->forward(ids, mask);
    const auto chosen = logits.narrow(1, 0, ids.size(1) - 1).log_softmax(-1).gather(2, ids.narrow(1, 1, ids.size(1) - 1).unsqueeze(2)).squeeze(2);
    const auto real = mask.narrow(1, 1, ids.size(1) - 1).to(torch::kFloat32);
    (chosen * real).sum().backward();
    logps[cuda_entries ? 0 : 1] = (chosen * real).detach();
    for (const auto& p : model->parameters()) grads[cuda_entries ? 0 : 1].push_back(p.grad().clone());
  }
  CHECK((logps[0] - logps[1]).abs().max().item<double>() <= 1e-4);
  double worst = 0.0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    const double scale = 1.0 + grads[1][i].abs().max().item<double>();
    worst = std::max(worst, (grads[0][i] - grads[1][i]).abs().max().item<double>() / scale);
  }
  INFO("largest gradient difference, relative " << worst);
  CHECK(worst <= 1e-4);
}
