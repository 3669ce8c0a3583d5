// Backend-vs-CPU checks for CUDA (llama.cpp's pattern): the golden models' logits and greedy tokens on
// the GPU against the same model on the CPU, and sampling that keeps the logits on the device. Without
// a CUDA device every case says so and passes (tools/gpu/device_check.sh runs them on a GPU).
#include <catch2/catch.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <optional>

#include "model/helpers.h"
#include "rayless/hf/model_directory.h"
#include "rayless/ops/kernel_plan.h"
#include "rayless/ops/ops.h"
#include "rayless/sampler/sampler.h"

using namespace rayless;

namespace {
const std::filesystem::path kGolden = std::filesystem::path(RAYLESS_TEST_DATA) / "hf-golden";

bool have_cuda() {
  if (torch::cuda::is_available()) return true;
  WARN("no CUDA device: skipped (run tools/gpu/device_check.sh on a GPU machine)");
  return false;
}

// 24 greedy tokens for two prompts of the golden token ids, with their log-probs
GenerationOutput greedy_tokens(CausalLM& model) {
  SamplingParams params;
  params.max_new_tokens = 24;
  params.greedy = true;
  params.return_logprobs = true;
  return generate(model, {{5, 17, 42, 8}, {9, 3}}, params, SamplingStream(7), nullptr);
}

// The golden qwen2 model's greedy tokens on the GPU with a CUDA kernel and with it switched off: the
// same tokens, log-probs within 1e-4
void same_tokens_without(ops::Kernel kernel) {
  CausalLM gpu = load_hf_model(kGolden / "qwen2", torch::kFloat32, torch::Device(torch::kCUDA, 0));
  const GenerationOutput with_kernel = greedy_tokens(gpu);
  const ops::KernelOverride off(kernel, false);
  const GenerationOutput without = greedy_tokens(gpu);
  CHECK(torch::equal(with_kernel.completion_ids.cpu(), without.completion_ids.cpu()));
  CHECK((with_kernel.logprobs - without.logprobs).abs().max().item<double>() <= 1e-4);
}
}  // namespace

TEST_CASE("cuda: golden models' logits on the GPU equal the CPU's within float32 rounding") {
  if (!have_cuda()) return;
  for (const std::string name : {"qwen2", "llama", "qwen3"}) {
    INFO(name);
    CausalLM cpu = load_hf_model(kGolden / name);
    CausalLM gpu = load_hf_model(kGolden / name, torch::kFloat32, torch::Device(torch::kCUDA, 0));
    cpu->eval();
    gpu->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor ids = torch::randint(3, cpu->config().vocab_size, {3, 17}, torch::kLong);
    const torch::Tensor mask = torch::ones_like(ids);
    const torch::Tensor a = cpu->forward(ids, mask);
    const torch::Tensor b = gpu->forward(ids.cuda(), mask.cuda()).cpu();
    const double error = (a - b).abs().max().item<double>();
    INFO("largest logit difference " << error);
    CHECK(error <= 1e-3);
  }
}

TEST_CASE("cuda: greedy generation on the GPU gives the CPU's tokens") {
  if (!have_cuda()) return;
  CausalLM cpu = load_hf_model(kGolden / "qwen2");
  CausalLM gpu = load_hf_model(kGolden / "qwen2", torch::kFloat32, torch::Device(torch::kCUDA, 0));
  const GenerationOutput a = greedy_tokens(cpu);
  const GenerationOutput b = greedy_tokens(gpu);
  CHECK(torch::equal(a.completion_ids, b.completion_ids.cpu()));
  CHECK((a.logprobs - b.logprobs.cpu()).abs().max().item<double>() <= 1e-3);
}

TEST_CASE("cuda: sampling on the GPU is seeded: the same seed gives the same tokens twice") {
  if (!have_cuda()) return;
  CausalLM gpu = load_hf_model(kGolden / "llama", torch::kFloat32, torch::Device(torch::kCUDA, 0));
  SamplingParams params;
  params.max_new_tokens = 16;
  params.top_k = 50;
  params.num_generations = 4;
  const SamplingStream g1(11), g2(11);
  const GenerationOutput a = generate(gpu, {{5, 17, 42}}, params, g1, nullptr);
  const GenerationOutput b = generate(gpu, {{5, 17, 42}}, params, g2, nullptr);
  CHECK(torch::equal(a.completion_ids.cpu(), b.completion_ids.cpu()));
}

// The CUDA backend's attention (folded_gqa_attention: the query heads of a group as query positions of
// their key head) against LibTorch's enable_gqa attention on the same device, in float32 and bfloat16,
// with gradients, then in the model: greedy tokens with the kernel equal the tokens without it.
TEST_CASE("cuda: grouped-query attention folded per key head gives enable_gqa's attention, and the same tokens") {
  if (!have_cuda()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(9);
  const torch::Device cuda(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO(dtype);
    const auto options = torch::TensorOptions().dtype(dtype).device(cuda);
    // a decode step of the 0.5B Qwen2.5 heads (14 over 2) on 37 keys, rows left-padded
    const auto q = torch::randn({6, 14, 1, 64}, options), k = torch::randn({6, 2, 37, 64}, options),
               v = torch::randn({6, 2, 37, 64}, options);
    auto allowed = torch::ones({6, 1, 1, 37}, torch::TensorOptions().dtype(torch::kBool).device(cuda));
    for (int64_t b = 0; b < 6; ++b) allowed[b].narrow(-1, 0, 3 * b).fill_(false);
    const torch::Tensor folded = ops::padded_attention(q, k, v, allowed, 0.125, true);
    torch::Tensor reference;
    {
      const ops::KernelOverride off(ops::Kernel::folded_gqa_attention, false);
      reference = ops::padded_attention(q, k, v, allowed, 0.125, true);
    }
    const double error = (folded.to(torch::kFloat32) - reference.to(torch::kFloat32)).abs().max().item<double>();
    INFO("largest difference " << error);
    CHECK(error <= (dtype == torch::kFloat32 ? 1e-5 : 2e-2));
  }
  // the training pass: gradients through the folded attention (memory-efficient backward) and through
  // enable_gqa's math kernel, float32
  {
    torch::AutoGradMode with_gradients(true);
    const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(cuda);
    const auto q0 = torch::randn({3, 6, 9, 32}, options), k0 = torch::randn({3, 2, 9, 32}, options),
               v0 = torch::randn({3, 2, 9, 32}, options), upstream = torch::randn({3, 9, 6 * 32}, options);
    const auto causal = torch::ones({9, 9}, torch::TensorOptions().dtype(torch::kBool).device(cuda)).tril().view({1, 1, 9, 9});
    std::vector<torch::Tensor> grads[2];
    for (const bool folded : {true, false}) {
      std::optional<ops::KernelOverride> off;
      if (!folded) off.emplace(ops::Kernel::folded_gqa_attention, false);
      auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true), v = v0.clone().requires_grad_(true);
      (ops::padded_attention(q, k, v, causal, 0.2, true) * upstream).sum().backward();
      grads[folded ? 0 : 1] = {q.grad(), k.grad(), v.grad()};
    }
    for (size_t i = 0; i < 3; ++i) CHECK((grads[0][i] - grads[1][i]).abs().max().item<double>() <= 1e-4);
  }
  same_tokens_without(ops::Kernel::folded_gqa_attention);  // qwen2: 4 query heads over 2
}

// The CUDA backend's RMSNorm (fused_rms_norm: LibTorch's _fused_rms_norm kernel) against transformers'
// formula on the CPU, values in float32 and bfloat16 and float32 gradients, then in the model: greedy
// tokens with the kernel equal the tokens without it.
TEST_CASE("cuda: the fused RMSNorm gives transformers' norm and gradients, and the same tokens") {
  if (!have_cuda()) return;
  torch::manual_seed(10);
  const torch::Device cuda(torch::kCUDA, 0);
  const auto reference_norm = [](const torch::Tensor& x, const torch::Tensor& weight) {
    return test::transformers_rms_norm(x, weight, 1e-6);
  };
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO(dtype);
    const auto x = torch::randn({16, 1, 896}).to(dtype), weight = (1.0 + torch::randn({896})).to(dtype);
    torch::Tensor on_gpu;
    {
      torch::NoGradGuard no_grad;
      on_gpu = ops::rms_norm(x.to(cuda), weight.to(cuda), 1e-6).cpu();
    }
    const auto expected = reference_norm(x, weight);
    const double error = ((on_gpu.to(torch::kFloat32) - expected.to(torch::kFloat32)).abs() /
                          (1.0 + expected.to(torch::kFloat32).abs())).max().item<double>();
    INFO("largest difference " << error);
    CHECK(error <= (dtype == torch::kFloat32 ? 1e-5 : 1e-2));
  }
  {
    const auto x0 = torch::randn({5, 7, 64}), w0 = 1.0 + torch::randn({64}), upstream = torch::randn({5, 7, 64});
    auto xg = x0.to(cuda).requires_grad_(true), wg = w0.to(cuda).requires_grad_(true);
    (ops::rms_norm(xg, wg, 1e-6) * upstream.to(cuda)).sum().backward();
    auto xc = x0.clone().requires_grad_(true), wc = w0.clone().requires_grad_(true);
    (reference_norm(xc, wc) * upstream).sum().backward();
    CHECK((xg.grad().cpu() - xc.grad()).abs().max().item<double>() <= 1e-4);
    CHECK((wg.grad().cpu() - wc.grad()).abs().max().item<double>() <= 1e-3);
  }
  same_tokens_without(ops::Kernel::fused_rms_norm);
}

// The CUDA backend's decode-step rotary embedding (joint_rotary: q and k together, half by half)
// against transformers' formula on the CPU, then in the model: greedy tokens with it equal the tokens
// without it.
TEST_CASE("cuda: a decode step's joint rotary embedding gives transformers' rotation, and the same tokens") {
  if (!have_cuda()) return;
  torch::manual_seed(12);
  const torch::Device cuda(torch::kCUDA, 0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO(dtype);
    const auto qkv = torch::randn({16, 18, 64}).to(dtype);  // 14 query heads and 2 key heads, then values
    const auto angles = torch::rand({16, 1, 32}) * 50.0;
    const auto cos = torch::cat({angles, angles}, -1).cos().to(dtype), sin = torch::cat({angles, angles}, -1).sin().to(dtype);
    std::pair<torch::Tensor, torch::Tensor> on_gpu, on_cpu;
    {
      torch::NoGradGuard no_grad;
      const auto qkv_gpu = qkv.to(cuda);
      on_gpu = ops::decode_rotary(qkv_gpu.narrow(1, 0, 14), qkv_gpu.narrow(1, 14, 2), cos.to(cuda), sin.to(cuda));
      const ops::KernelOverride cpu_kernel_off(ops::Kernel::decode_rotary, false);  // the CPU's reference
      on_cpu = ops::decode_rotary(qkv.narrow(1, 0, 14), qkv.narrow(1, 14, 2), cos, sin);
    }
    for (const auto& [gpu, cpu] : {std::pair{on_gpu.first, on_cpu.first}, std::pair{on_gpu.second, on_cpu.second}}) {
      const double error = (gpu.cpu().to(torch::kFloat32) - cpu.to(torch::kFloat32)).abs().max().item<double>();
      INFO("largest difference " << error);
      CHECK(error <= (dtype == torch::kFloat32 ? 1e-5 : 5e-2));
    }
  }
  same_tokens_without(ops::Kernel::joint_rotary);
}
