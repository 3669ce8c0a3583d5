// rayless bench model: forward+backward tokens/s and KV-cached generation tokens/s for the embedded
// tiny model and a Qwen2.5-0.5B-shaped model with random weights, each next to the FLOP/s it achieves
// and the machine's measured matmul FLOP/s. FLOPs are counted the usual way: 2 per multiply-add of
// every weight matrix (the LM head included, the embedding lookup not) plus attention's QK^T and AV
// (causal: half the square); backward = 2 x forward.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <torch/cuda.h>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/hf/model_directory.h"
#include "rayless/sampler/sampler.h"

namespace rayless::cli {
namespace {

using Clock = BenchClock;

// Best of a few timed square matmuls in the dtype, through torch::linear (the kernel path the model's
// layers take; a plain torch::mm in bf16 takes a much slower path on CPUs without bf16 instructions).
double matmul_flops(torch::Dtype dtype, torch::Device device) {
  const int64_t n = 1024;
  auto a = torch::randn({n, n}).to(device, dtype), b = torch::randn({n, n}).to(device, dtype);
  torch::linear(a, b);  // warm-up
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    auto c = torch::linear(a, b);
    if (device.is_cuda()) c.cpu();
    best = std::max(best, 2.0 * n * n * n / seconds_since(start));
  }
  return best;
}

double matmul_weights(const ModelArchConfig& c) {
  const double embed = double(c.vocab_size) * c.hidden_size;
  const double n = double(c.num_parameters());
  return c.tie_word_embeddings ? n : n - embed;  // lm head counted once, lookup not
}

// forward FLOPs for `tokens` tokens of sequences of length seq (causal attention)
double forward_flops(const ModelArchConfig& c, double tokens, double seq) {
  const double attention = 2.0 * 2.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * (seq / 2.0);
  return tokens * (2.0 * matmul_weights(c) + attention);
}

struct Row {
  std::string model, dtype, what;
  double tokens_per_s, flops, machine_flops;
};

ModelArchConfig qwen25_05b_shape() {
  nlohmann::json j = {{"model_type", "qwen2"}, {"vocab_size", 151936}, {"hidden_size", 896},
                      {"intermediate_size", 4864}, {"num_hidden_layers", 24}, {"num_attention_heads", 14},
                      {"num_key_value_heads", 2}, {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6},
                      {"rope_theta", 1000000.0}, {"tie_word_embeddings", true}};
  return ModelArchConfig::from_json(j, "qwen2.5-0.5b shape");
}

void bench_one(const std::string& label, const ModelArchConfig& config, torch::Dtype dtype, torch::Device device,
               int64_t train_batch, int64_t train_seq, int64_t steps, int64_t gen_batch, int64_t prompt_len,
               int64_t gen_tokens, bool warm_up, std::vector<Row>& rows) {
  std::fprintf(stderr, "bench model: %s (%.1fM parameters), building...\n", label.c_str(), config.num_parameters() / 1e6);
  CausalLM model(config);
  model->init_weights(1);
  model->to(device, dtype);
  const double machine = matmul_flops(dtype, device);
  const std::string dtype_name = dtype == torch::kBFloat16 ? "bf16" : (dtype == torch::kFloat16 ? "fp16" : "fp32");

  // forward + backward of a mean log-prob loss (the LM head over all positions)
  model->train();
  auto ids = torch::randint(0, std::min<int64_t>(config.vocab_size, 256), {train_batch, train_seq}, torch::kLong).to(device);
  auto step = [&] {
    model->zero_grad();
    auto loss = model->forward(ids).to(torch::kFloat32).log_softmax(-1).select(-1, 0).mean();
    loss.backward();
  };
  if (warm_up) step();
  std::fprintf(stderr, "bench model: %s: forward+backward...\n", label.c_str());
  auto start = Clock::now();
  for (int64_t s = 0; s < steps; ++s) step();
  double elapsed = seconds_since(start);
  const double train_tokens = double(steps) * train_batch * train_seq;
  rows.push_back({label, dtype_name, str("fwd+bwd ", train_batch, "x", train_seq), train_tokens / elapsed,
                  3.0 * forward_flops(config, train_tokens, train_seq) / elapsed, machine});
  model->zero_grad();

  // generation: gen_batch prompts of prompt_len tokens, gen_tokens new tokens each (no EOS)
  std::vector<std::vector<int64_t>> prompts(gen_batch);
  for (auto& p : prompts)
    for (int64_t t = 0; t < prompt_len; ++t) p.push_back(1 + (t * 7 + p.size()) % 200);
  SamplingParams params;
  params.max_new_tokens = gen_tokens;
  params.pad_id = 0;
  const SamplingStream gen(0);
  std::fprintf(stderr, "bench model: %s: generation...\n", label.c_str());
  start = Clock::now();
  auto out = generate(model, prompts, params, gen);
  elapsed = seconds_since(start);
  const double new_tokens = double(out.completion_mask.sum().item<int64_t>());
  // prefill counts as work done; per new token the context averages prompt + gen/2
  const double flops = forward_flops(config, double(gen_batch) * prompt_len, prompt_len) +
                       forward_flops(config, new_tokens, 2.0 * (prompt_len + gen_tokens / 2.0));
  rows.push_back({label, dtype_name, str("generate ", gen_batch, "x", gen_tokens, " (prompt ", prompt_len, ")"),
                  new_tokens / elapsed, flops / elapsed, machine});
}

}  // namespace

int bench_model(const Args& args) {
  po::options_description options("rayless-bench model");
  std::string which, device_name;
  int64_t steps = 3, gen_tokens = 16;
  options.add_options()("model", po::value(&which)->default_value("all"), "tiny | 0.5b | all")(
      "steps", po::value(&steps)->default_value(3), "timed forward+backward steps (tiny; the 0.5B model runs 1 of 1x64 tokens, no warm-up)")(
      "gen-tokens", po::value(&gen_tokens)->default_value(16), "new tokens per generated row (tiny; 0.5B: 4 after an 8-token prompt)")(
      "device", po::value(&device_name)->default_value("cpu"), "cpu | cuda");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench model [--model tiny|0.5b|all] [--steps N]", options, vm)) return 0;
  inputCheck(which == "tiny" || which == "0.5b" || which == "all", "bench model: --model must be tiny, 0.5b or all");
  inputCheck(device_name == "cpu" || torch::cuda::is_available(), "bench model: no CUDA device");
  const torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
  std::vector<Row> rows;
  if (which != "0.5b")
    bench_one("tiny (configs/models/tiny)", load_model_config("configs/models/tiny"), torch::kFloat32, device, 8, 128,
              steps, 32, 16, gen_tokens, true, rows);
  if (which != "tiny")
    // kept short: bf16 matmuls on a CPU without bf16 instructions are slow (one step, no warm-up)
    bench_one("Qwen2.5-0.5B shape, random", qwen25_05b_shape(), torch::kBFloat16, device, 1, 64, 1, 32, 8, 4, false, rows);
  std::cout << "| model | dtype | run | tokens/s | achieved GFLOP/s | machine matmul GFLOP/s (linear 1024^2, same dtype) |\n"
               "|---|---|---|---|---|---|\n";
  char line[512];
  for (const auto& r : rows) {
    std::snprintf(line, sizeof(line), "| %s | %s | %s | %.1f | %.2f | %.2f |\n", r.model.c_str(), r.dtype.c_str(),
                  r.what.c_str(), r.tokens_per_s, r.flops / 1e9, r.machine_flops / 1e9);
    std::cout << line;
  }
  return 0;
}

}  // namespace rayless::cli
