// rayless bench decode: one KV-cached decode step as the generation engine takes it (forward_slots on
// the slots' preallocated keys and values: one new token per row, then the LM head) at 1 and 32 rows, next to the two limits the machine sets:
//   * 1 row streams every weight once per step, so its floor is weight bytes / memory read rate;
//   * many rows turn the step into matmuls, so its ceiling is the measured matmul rate.
// It also counts the ATen operator calls one step makes (RecordFunction; nested calls included), the
// fixed per-step cost that small batches pay.
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/base/files.h"
#include "rayless/model/model.h"
#include "rayless/ops/autocast_scope.h"
#include "rayless/ops/kernel_plan.h"

namespace rayless::cli {
namespace {

using Clock = BenchClock;

template <typename F>
double best_seconds(int repeats, F&& run) {
  run();  // warm-up
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    run();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

// linear shaped like the model's MLP on a training batch, in the dtype the layers compute in
double matmul_gflops(const ModelArchConfig& c, torch::ScalarType dtype) {
  auto x = torch::randn({4096, c.hidden_size}).to(dtype), w = torch::randn({c.intermediate_size, c.hidden_size}).to(dtype);
  return 2.0 * 4096 * c.hidden_size * c.intermediate_size / best_seconds(5, [&] { torch::linear(x, w); }) / 1e9;
}

// A 1 GiB matrix times a vector: far larger than any cache, and the access a 1-row decode step makes
// (it reads faster than a plain sum over the same bytes, so it is the fairer floor)
double read_gbs() {
  auto big = torch::randn({16384, 16384}), v = torch::randn({16384});
  return double(big.numel()) * 4 / best_seconds(3, [&] { torch::mv(big, v); }) / 1e9;
}

std::atomic<int64_t> operator_calls{0};
std::map<std::string, int64_t> calls_by_name;  // filled only with --op-names (one thread records)
bool record_names = false;
std::unique_ptr<at::ObserverContext> count_call(const at::RecordFunction& fn) {
  ++operator_calls;
  if (record_names) ++calls_by_name[fn.name()];
  return nullptr;
}

struct DecodeRow {
  int64_t rows;
  double step_ms, operator_calls, copy_ms;  // copy: the fused decoding weights, taken once per generation
};

DecodeRow time_decode(CausalLM& model, int64_t rows, int64_t prompt_len, int64_t steps, bool fuse) {
  auto ids = torch::randint(1, std::min<int64_t>(model->config().vocab_size, 200), {rows, prompt_len}, torch::kLong);
  std::optional<FusedGenerationWeights> fused;
  const auto copy_start = Clock::now();
  if (fuse) fused.emplace(model);  // as generate() decodes
  const double copy_ms = 1e3 * seconds_since(copy_start);
  // the prompts prefilled, their keys and values then in slots as the generation engine holds them
  // ([rows, kv heads, positions, head dim], preallocated for every step below)
  KVCache prefilled;
  model->forward_hidden(ids, torch::ones({rows, prompt_len}, torch::kLong), {}, &prefilled);
  const int64_t max_len = prompt_len + steps + 2;  // the warm-up, the counted and the timed steps
  KVCache slots;
  for (size_t l = 0; l < prefilled.keys.size(); ++l) {
    for (auto [from, to] : {std::pair{&prefilled.keys[l], &slots.keys}, std::pair{&prefilled.values[l], &slots.values}}) {
      auto held = torch::zeros({rows, from->size(1), max_len, from->size(3)}, from->options());
      held.narrow(2, 0, prompt_len).copy_(*from);
      to->push_back(held);
    }
  }
  auto next = ids.select(1, prompt_len - 1);
  auto positions = torch::full({rows}, prompt_len, torch::kLong);
  int64_t position = prompt_len;
  // one engine step (GenerationEngine::step_on_device's forward): every row at the same position,
  // attending to the positions written so far
  auto step = [&] {
    slots.attend_length = position + 1;
    auto hidden = model->forward_slots(next, positions, slots);
    model->logits(hidden).argmax(-1);
    positions.add_(1);
    ++position;
  };
  step();  // warm-up
  operator_calls = 0;
  calls_by_name.clear();
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(count_call).scopes({at::RecordScope::FUNCTION}));
  step();
  at::removeCallback(handle);
  const double calls = double(operator_calls.load());
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    const auto start = Clock::now();
    step();
    times.push_back(seconds_since(start));
  }
  std::nth_element(times.begin(), times.begin() + steps / 2, times.end());
  return {rows, 1e3 * times[static_cast<size_t>(steps / 2)], calls, copy_ms};
}

}  // namespace

int bench_decode(const Args& args) {
  po::options_description options("rayless-bench decode");
  std::string config_json, rows_list;
  int64_t steps = 32, prompt_len = 32;
  bool op_names = false, unfused = false, bf16 = false, libtorch_attention = false, libtorch_rms_norm = false,
       libtorch_silu = false;
  options.add_options()("config-json", po::value(&config_json)->required(), "HF config.json of the model shape")(
      "rows", po::value(&rows_list)->default_value("1,32"), "decode batch sizes, comma-separated")(
      "steps", po::value(&steps)->default_value(32), "timed decode steps per batch size (the median is shown)")(
      "prompt-length", po::value(&prompt_len)->default_value(32), "tokens in the cache before the timed steps")(
      "op-names", po::bool_switch(&op_names), "also list the operator calls of one step by name")(
      "unfused", po::bool_switch(&unfused), "separate q/k/v and gate/up matmuls (generate() fuses them), for comparison")(
      "bf16", po::bool_switch(&bf16), "decode under bfloat16 autocast, as the trainer generates with train.bf16")(
      "libtorch-attention", po::bool_switch(&libtorch_attention),
      "LibTorch's attention instead of rayless's float32 decode kernel (avx2_decode_attention), for comparison")(
      "libtorch-rms-norm", po::bool_switch(&libtorch_rms_norm),
      "LibTorch's operators for the RMSNorms instead of rayless's float32 decode kernel (avx2_decode_rms_norm)")(
      "libtorch-silu", po::bool_switch(&libtorch_silu),
      "LibTorch's silu and mul instead of rayless's float32 decode kernel (avx2_decode_silu_times)");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench decode --config-json FILE [--rows 1,32] [--steps N]", options, vm)) return 0;
  const ModelArchConfig config = ModelArchConfig::from_json(read_json_file(config_json), config_json);
  inputCheck(steps >= 1 && prompt_len >= 1, "bench decode: --steps and --prompt-length must be >= 1");
  const std::vector<int64_t> batch_sizes = parse_rows(rows_list, "bench decode");

  record_names = op_names;
  std::optional<ops::KernelOverride> no_attention, no_rms_norm, no_silu;  // the kernels off for this run
  if (libtorch_attention) no_attention.emplace(ops::Kernel::avx2_decode_attention, false);
  if (libtorch_rms_norm) no_rms_norm.emplace(ops::Kernel::avx2_decode_rms_norm, false);
  if (libtorch_silu) no_silu.emplace(ops::Kernel::avx2_decode_silu_times, false);
  c10::InferenceMode inference;
  const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
  const double weight_bytes = bf16 ? 2 : 4;
  const char* dtype_name = bf16 ? "bfloat16" : "float32";
  CausalLM model(config);
  model->init_weights(1);
  model->eval();
  const double parameters = double(config.num_parameters());
  // weights a decode step reads: every matrix once, the LM head included, the embedding lookup not
  const double streamed = config.tie_word_embeddings ? parameters : parameters - double(config.vocab_size) * config.hidden_size;
  const double matmul = matmul_gflops(config, dtype), bandwidth = read_gbs();
  const ops::AutocastScope autocast(bf16, torch::kCPU);  // the model's passes only, not the machine's rates
  const double floor_ms = 1e3 * streamed * weight_bytes / (bandwidth * 1e9);
  std::printf("model: %.1fM parameters, %.1f MB of %s weights read per decode step; %d thread(s)\n",
              parameters / 1e6, streamed * weight_bytes / 1e6, dtype_name, at::get_num_threads());
  std::printf("machine: %s matmul %.1f GFLOP/s ([4096 x %lld] x [%lld x %lld]), memory read %.1f GB/s (1 GiB matrix-vector)\n",
              dtype_name, matmul, (long long)config.hidden_size, (long long)config.intermediate_size, (long long)config.hidden_size,
              bandwidth);
  std::printf("decode floor (weights read once at that rate): %.2f ms per step\n", floor_ms);
  // the plan's entries a decode step runs (rayless version prints them all)
  for (const std::string& entry : ops::kernel_plan().describe())
    for (const char* used : {"generation_linear.", "attention.decode", "rms_norm.decode", "rotary.decode", "silu_times.decode"})
      if (entry.rfind(used, 0) == 0) std::printf("kernel %s\n", entry.c_str());
  std::printf("\n");
  std::cout << "| rows | ms per decode step | x floor | GFLOP/s | % of matmul | ATen operator calls per step | decoding copy, ms |\n"
               "|---|---|---|---|---|---|---|\n";
  for (int64_t rows : batch_sizes) {
    const DecodeRow r = time_decode(model, rows, prompt_len, steps, !unfused);
    const double gflops = 2.0 * streamed * double(rows) / (r.step_ms * 1e-3) / 1e9;
    std::printf("| %lld | %.2f | %.2f | %.1f | %.0f %% | %.0f | %.1f |\n", (long long)rows, r.step_ms, r.step_ms / floor_ms,
                gflops, 100.0 * gflops / matmul, r.operator_calls, r.copy_ms);
    if (op_names) {
      std::vector<std::pair<int64_t, std::string>> by_count;
      for (const auto& [name, count] : calls_by_name) by_count.emplace_back(count, name);
      std::sort(by_count.rbegin(), by_count.rend());
      std::string line = "  calls by operator:";
      for (const auto& [count, name] : by_count) line += str(" ", name, " ", count);
      std::printf("%s\n", line.c_str());
    }
  }
  return 0;
}

}  // namespace rayless::cli
