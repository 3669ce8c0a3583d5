// What the tests of the decode step's one-pass kernels (avx2_decode_attention, avx2_decode_rms_norm,
// avx2_decode_silu_times) share: the skip where the CPU lacks AVX2 with FMA, and the tiny model's cached
// decode with the kernel and without it, against its full forward.
#pragma once
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <vector>

#include "rayless/model/model.h"
#include "rayless/ops/kernel_plan.h"

namespace rayless::testing {

// the largest error of out against the float64 exact result, relative to the exact value at that element
// plus `floor` (which keeps outputs near 0 from dominating)
inline double relative_error(const torch::Tensor& out, const torch::Tensor& exact, double floor) {
  return ((out.to(torch::kFloat64) - exact).abs() / (exact.abs() + floor)).max().item<double>();
}

// true (and a warning naming the kernel) where this CPU cannot run it, so its kernel-only tests return
inline bool kernel_missing(bool available, const char* kernel) {
  if (available) return false;
  WARN("this CPU lacks AVX2 with FMA: the " << kernel << " kernel is not exercised here");
  return true;
}

// End to end in the model: a prefill of 5 tokens, then one token per step through the KV cache up to 20,
// on the fused decoding weights as generation runs, with the kernel and without it, against the full
// forward of the same tokens (6 left-padded rows). Checks that both decodes agree with each other and
// with the full forward within 1e-5, and that they differ somewhere (the kernel ran). Returns the
// two decodes' logits for checks of the caller's own.
struct CachedDecodes {
  torch::Tensor with_kernel, without;
  int64_t prefill = 0;
};
inline CachedDecodes check_cached_decode(ops::Kernel kernel, uint64_t seed) {
  CausalLM model(load_model_config(std::filesystem::path(RAYLESS_SOURCE_DIR) / "configs/models/tiny"));
  model->init_weights(seed);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  const int64_t rows = 6, length = 20, prefill = 5;
  const auto ids = torch::randint(0, 256, {rows, length}, torch::kLong);
  auto mask = torch::ones({rows, length}, torch::kLong);
  for (int64_t b = 0; b < rows; ++b) mask[b].narrow(0, 0, b % 4).fill_(0);  // left padding
  const auto decode = [&](bool with_kernel) {
    const ops::KernelOverride on(kernel, with_kernel);
    FusedGenerationWeights fused(model);
    KVCache cache;
    std::vector<torch::Tensor> steps{
        model->logits(model->forward_hidden(ids.narrow(1, 0, prefill), mask.narrow(1, 0, prefill), {}, &cache))};
    for (int64_t t = prefill; t < length; ++t)
      steps.push_back(model->logits(model->forward_hidden(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), {}, &cache)));
    return torch::cat(steps, 1);
  };
  CachedDecodes out{decode(true), decode(false), prefill};
  const auto full = model->forward(ids, mask);
  const auto real = mask.to(torch::kBool).unsqueeze(-1);
  const auto error = [&](const torch::Tensor& a, const torch::Tensor& b) {
    return (a - b).abs().masked_fill(real.logical_not(), 0).max().item<double>();
  };
  CAPTURE(error(out.with_kernel, full), error(out.without, full));
  CHECK(error(out.with_kernel, out.without) < 1e-5);
  CHECK(error(out.with_kernel, full) < 1e-5);
  // the kernel really ran: switched off, the decode differs in rounding somewhere
  CHECK_FALSE(torch::equal(out.with_kernel, out.without));
  return out;
}

}  // namespace rayless::testing
