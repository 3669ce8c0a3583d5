// rayless-bench generation: the generation engine on a long-tail workload (a quarter of the rows end
// after --short tokens, the rest run to --tokens), next to the engine it replaced, in the same run on
// the same model: completion tokens/s, decode steps, time per step, slot occupancy (tokens kept per
// row computed) and host synchronisations per token. The rows' lengths are forced
// (SamplingParams::row_max_new_tokens), so both engines do the same work whatever they sample.
//
// The old engine is kept here, and only here, as the baseline: today's loop before issue 47 (one
// prefill, the KV cache repeated per generation, every row decoded together, a host read of the
// finished count and of the sampled ids at every step, the batch compacted by index_select over the
// whole cache once a quarter of its rows finished, torch::multinomial on a CPU generator).
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>

#include <torch/cuda.h>

#include "bench/benches.h"
#include "ops/backend.h"
#include "cli/options.h"
#include "rayless/base/choices.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/hf/model_directory.h"
#include "rayless/runtime/op_profile.h"
#include "rayless/sampler/sampler.h"

namespace rayless::cli {
namespace {

struct Measured {
  std::string engine, cuda_graphs = "off", lagged_look = "auto";
  double seconds = 0;
  int64_t tokens = 0, decode_steps = 0, slot_steps = 0, host_syncs = 0, slots = 0;
  nlohmann::json profile;  // --profile: where one more run's time went (op_profile.h)
};

// The pre-issue-47 decode loop (src/sampler/sampler.cpp at 7639223), reduced to what the workload uses:
// no stop strings, no repetition penalty, no log-probs; a row ends at its EOS or its own limit.
Measured old_engine(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts, const SamplingParams& params,
                    uint64_t seed) {
  c10::InferenceMode inference;
  model->eval();
  Measured m;
  m.engine = "old (eager, compacting)";
  const auto start = BenchClock::now();
  torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto device = model->device();
  const int64_t n = static_cast<int64_t>(prompts.size());
  const bool greedy = params.greedy || params.temperature == 0.0;
  auto [prompt_ids, prompt_mask] = left_pad(prompts, params.pad_id);
  const int64_t prompt_len = prompt_ids.size(1);
  std::optional<FusedGenerationWeights> fused;
  if (params.fused_weights) fused.emplace(model);
  KVCache cache;
  cache.capacity_hint = prompt_len + params.max_new_tokens;
  auto hidden = model->forward_hidden(prompt_ids.to(device), prompt_mask.to(device), {}, &cache);
  auto last_logits = model->logits(hidden.select(1, prompt_len - 1)).to(torch::kFloat32);
  const auto limits = torch::tensor(params.row_max_new_tokens, torch::kLong);
  const auto eos = torch::tensor(params.eos_ids.empty() ? std::vector<int64_t>{-1} : params.eos_ids, torch::kLong);
  auto rows_in_batch = torch::arange(n, torch::kLong);
  auto done_in_batch = torch::zeros({n}, torch::kBool);
  auto mask = prompt_mask.to(device);
  auto next_position = prompt_mask.sum(1, /*keepdim=*/true).to(device);
  auto finished = torch::zeros({n}, torch::kBool);
  auto lengths = torch::zeros({n}, torch::kLong);
  for (int64_t step = 0; step < params.max_new_tokens; ++step) {
    const auto processed = process_logits(last_logits, {}, params);
    torch::Tensor sampled_on_device =
        greedy ? processed.argmax(-1)
               : torch::multinomial(processed.softmax(-1), 1, /*replacement=*/false, generator).squeeze(1);
    torch::Tensor sampled = sampled_on_device.cpu();
    const auto running = done_in_batch.logical_not();
    ++m.decode_steps;
    m.slot_steps += sampled.size(0);
    lengths.index_add_(0, rows_in_batch, running.to(torch::kLong));
    const auto hit = (torch::isin(sampled, eos) | (limits.index_select(0, rows_in_batch) <= step + 1)) & running;
    done_in_batch = done_in_batch | hit;
    finished.index_fill_(0, rows_in_batch.masked_select(hit), true);
    const int64_t num_done = done_in_batch.sum().item<int64_t>();  // one host sync per step
    ++m.host_syncs;
    if (num_done == done_in_batch.size(0) || step + 1 == params.max_new_tokens) break;
    if (4 * num_done >= done_in_batch.size(0)) {
      const auto keep = done_in_batch.logical_not().nonzero().squeeze(1);
      cache.select_rows(keep);
      mask = mask.index_select(0, keep.to(device));
      next_position = next_position.index_select(0, keep.to(device));
      rows_in_batch = rows_in_batch.index_select(0, keep);
      sampled = sampled.index_select(0, keep);
      done_in_batch = done_in_batch.index_select(0, keep);
    }
    mask = torch::cat({mask, torch::ones({mask.size(0), 1}, mask.options())}, 1);
    hidden = model->forward_hidden(sampled.unsqueeze(1).to(device), mask, next_position, &cache);
    next_position = next_position + 1;
    last_logits = model->logits(hidden.select(1, 0)).to(torch::kFloat32);
  }
  m.seconds = seconds_since(start);
  m.tokens = lengths.sum().item<int64_t>();
  m.slots = n;
  return m;
}

// A list of engine modes ("off,on"): each off, on or auto.
std::vector<std::string> parse_modes(const std::string& list, const char* option) {
  std::vector<std::string> modes;
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    modes.push_back(list.substr(start, comma - start));
    inputCheck(modes.back() == "off" || modes.back() == "on" || modes.back() == "auto", "bench generation: ", option,
               " must list off, on or auto, got \"", list, "\"");
    start = comma + 1;
  }
  return modes;
}

Measured new_engine(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts, const SamplingParams& params,
                    uint64_t seed) {
  const auto start = BenchClock::now();
  const GenerationOutput out = generate(model, prompts, params, SamplingStream(seed));
  Measured m;
  m.seconds = seconds_since(start);
  m.engine = str("new (slots ", out.stats.slots, ", sync every ", params.sync_interval > 0 ? params.sync_interval : 1,
                 params.cuda_graphs == "off" ? "" : ", CUDA graphs " + params.cuda_graphs,
                 params.lagged_look == "auto" ? "" : ", lagged looks " + params.lagged_look, ")");
  m.cuda_graphs = params.cuda_graphs;
  m.lagged_look = params.lagged_look;
  m.tokens = out.completion_mask.sum().item<int64_t>();
  m.decode_steps = out.stats.decode_steps;
  m.slot_steps = out.stats.slot_steps;
  m.host_syncs = out.stats.host_syncs;
  m.slots = out.stats.slots;
  return m;
}

// Memory read rate of the device, bytes/s: the sum of a tensor far larger than any cache.
double read_bytes_per_second(const torch::Device& device) {
  const int64_t elements = device.is_cuda() ? (int64_t{1} << 28) : (int64_t{1} << 26);  // 1 GiB / 256 MiB of float32
  const auto x = torch::ones({elements}, torch::TensorOptions().device(device));
  x.sum().item<float>();  // warm-up
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = BenchClock::now();
    x.sum().item<float>();
    best = std::min(best, seconds_since(start));
  }
  return double(elements) * 4 / best;
}

}  // namespace

int bench_generation(const Args& args) {
  po::options_description options("rayless-bench generation");
  std::string model_json, rows_list, sync_list, engines, device_name, dtype_name, json_out, graphs_list, lagged_list,
      profile_dir, table_name;
  int64_t tokens = 256, short_tokens = 16, prompt_tokens = 32, slots = 0, repeats = 2;
  uint64_t seed = 1;
  bool greedy = false;
  options.add_options()
      ("model-json", po::value(&model_json)->default_value("tools/bench/models/tiny.json"),
       "a model's config.json (random weights; vocab_size defaults to 272, the byte tokenizer's)")
      ("rows", po::value(&rows_list)->default_value("64"), "rows generated (distinct prompts), a list: 1,16,64,256")
      ("tokens", po::value(&tokens)->default_value(tokens), "tokens of the long rows (max_new_tokens)")
      ("short", po::value(&short_tokens)->default_value(short_tokens),
       "tokens of the short rows (every fourth row; = --tokens for equal lengths)")
      ("prompt-tokens", po::value(&prompt_tokens)->default_value(prompt_tokens), "longest prompt (prompts run from half of it)")
      ("slots", po::value(&slots)->default_value(slots), "the new engine's slots (0 = every row)")
      ("sync-intervals", po::value(&sync_list)->default_value("1,4,8"), "the new engine's sync intervals to run")
      ("engines", po::value(&engines)->default_value("both"), "old | new | both (old: CPU only)")
      ("cuda-graphs", po::value(&graphs_list)->default_value("off"), "the new engine's generation.cuda_graphs values to run (CUDA): off,on")
      ("lagged-look", po::value(&lagged_list)->default_value("auto"),
       "the new engine's lagged looks to run: auto (on a GPU), on, off, or a list: on,off")
      ("repeats", po::value(&repeats)->default_value(repeats), "runs of each engine (the best is shown), after one warm-up")
      ("greedy", po::bool_switch(&greedy), "argmax instead of sampling at temperature 1")
      ("device", po::value(&device_name)->default_value("cpu"), "cpu | cuda")
      ("dtype", po::value(&dtype_name)->default_value("float32"), "float32 | bfloat16 | float16 (GPU)")
      ("json", po::value(&json_out)->default_value(""), "also write the results and settings to this JSON file")
      ("profile", po::value(&profile_dir)->default_value(""),
       "after the timed runs, one more run of each setting under LibTorch's profiler (host operators; on CUDA "
       "kernels, copies, launches, host waits): a summary per run into this folder (op_profile.h)")
      ("cpu-runs-table", po::value(&table_name)->default_value("cpu"),
       "cpu | cuda: the backend table the CPU runs (cuda: the CUDA backend's kernels, LibTorch compositions, on the "
       "CPU; with --profile, the operators a GPU's decode step would launch, counted without a GPU)")
      ("seed", po::value(&seed)->default_value(seed), "weights and sampling seed");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench generation [--model-json FILE] [--rows 64] [--tokens N] [--sync-intervals 1,4,8]",
                     options, vm))
    return 0;
  inputCheck(tokens >= 1 && short_tokens >= 1 && prompt_tokens >= 2 && slots >= 0 && repeats >= 1,
             "bench generation: --tokens, --short, --repeats must be >= 1, --prompt-tokens >= 2, --slots >= 0");
  inputCheck(engines == "old" || engines == "new" || engines == "both", "bench generation: --engines must be old, new or both");
  inputCheck(device_name == "cpu" || device_name == "cuda", "bench generation: --device must be cpu or cuda");
  inputCheck(table_name == "cpu" || table_name == "cuda", "bench generation: --cpu-runs-table must be cpu or cuda");
  std::optional<ops::CpuRunsTable> cpu_runs_cuda;
  if (table_name == "cuda") cpu_runs_cuda.emplace(ops::cuda_table());
  inputCheck(device_name == "cpu" || torch::cuda::is_available(), "bench generation: --device cuda but no CUDA device");
  inputCheck(device_name == "cpu" || engines == "new", "bench generation: the old engine runs on the CPU only (--engines new)");
  const torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
  const torch::Dtype dtype = torch_dtype_of(parse_choice<ModelDtype>(dtype_name, "--dtype"));
  const std::vector<int64_t> row_counts = parse_rows(rows_list, "bench generation --rows");
  const std::vector<int64_t> sync_intervals = parse_rows(sync_list, "bench generation --sync-intervals");
  const std::vector<std::string> graph_modes = parse_modes(graphs_list, "--cuda-graphs");
  const std::vector<std::string> lagged_modes = parse_modes(lagged_list, "--lagged-look");
  if (!profile_dir.empty()) std::filesystem::create_directories(profile_dir);
  nlohmann::json config = read_json_file(model_json);
  if (!config.contains("vocab_size")) config["vocab_size"] = 272;
  const ModelArchConfig arch = ModelArchConfig::from_json(config, model_json);
  inputCheck(prompt_tokens + tokens <= arch.max_position_embeddings, "bench generation: --prompt-tokens + --tokens = ",
             prompt_tokens + tokens, " is past ", model_json, "'s max_position_embeddings ", arch.max_position_embeddings);
  torch::NoGradGuard no_grad;
  CausalLM model(arch);
  model->init_weights(seed);
  model->to(device, dtype);

  // the floor of a decode step: every weight read once (the LM head is the embedding when tied)
  const double weight_bytes = double(arch.num_parameters()) * double(c10::elementSize(dtype));
  const double read_rate = read_bytes_per_second(device);
  std::vector<Measured> results;
  std::vector<int64_t> results_rows;
  for (const int64_t rows : row_counts) {
    // prompts of varied lengths; every fourth row short; no EOS (the limits decide the lengths)
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(rows));
    SamplingParams params;
    params.max_new_tokens = tokens;
    params.greedy = greedy;
    params.pad_id = 0;
    params.eos_ids = {-5};  // no id: rows end at their limits
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t length = prompt_tokens / 2 + (r * 7) % (prompt_tokens - prompt_tokens / 2 + 1);
      for (int64_t t = 0; t < length; ++t) prompts[static_cast<size_t>(r)].push_back(1 + (r * 31 + t * 7) % 200);
      params.row_max_new_tokens.push_back(r % 4 == 0 ? short_tokens : tokens);
    }
    const auto best_of = [&](auto&& run, const std::string& profile_name) {
      run();  // warm-up
      Measured best;
      for (int64_t i = 0; i < repeats; ++i) {
        Measured m = run();
        if (i == 0 || m.seconds < best.seconds) best = m;
      }
      if (!profile_dir.empty()) {  // not timed: the profiler slows what it records
        OpProfile profile(device);
        const Measured m = run();
        best.profile = profile.stop(m.decode_steps);
        best.profile["file"] = str(profile_dir, "/generation-rows", rows, "-", profile_name, ".json");
        // kernel names are whatever the libraries compiled in: replace any byte that is not UTF-8
        write_text_atomically(best.profile["file"].get<std::string>(),
                              best.profile.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
        std::fprintf(stderr, "bench generation: %lld rows, %s: %s\n", static_cast<long long>(rows), m.engine.c_str(),
                     profile_line(best.profile).c_str());
      }
      results.push_back(best);
      results_rows.push_back(rows);
    };
    std::fprintf(stderr, "bench generation: %s on %s (%s), %lld rows x up to %lld tokens (every fourth row %lld)\n",
                 model_json.c_str(), device_name.c_str(), dtype_name.c_str(), static_cast<long long>(rows),
                 static_cast<long long>(tokens), static_cast<long long>(short_tokens));
    if (engines != "new") best_of([&] { return old_engine(model, prompts, params, seed); }, "old");
    if (engines != "old")
      for (const std::string& graphs : graph_modes)
        for (const std::string& lagged : lagged_modes)
          for (const int64_t interval : sync_intervals) {
            SamplingParams p = params;
            p.slots = slots;
            p.sync_interval = interval;
            p.cuda_graphs = graphs;
            p.lagged_look = lagged;
            best_of([&] { return new_engine(model, prompts, p, seed); },
                    str("graphs-", graphs, "-lagged-", lagged, "-sync", interval));
          }
  }
  std::printf("weights %.1f MB, read at %.1f GB/s: a decode step's floor is %.3f ms\n", weight_bytes / 1e6, read_rate / 1e9,
              1e3 * weight_bytes / read_rate);
  std::cout << "| rows | engine | completion tokens/s | decode steps | ms per decode step | slot occupancy | host syncs per token |\n"
               "|---|---|---|---|---|---|---|\n";
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const Measured& m = results[i];
    const double tokens_per_s = double(m.tokens) / m.seconds;
    const double step_ms = 1e3 * m.seconds / double(std::max<int64_t>(1, m.decode_steps));
    const double occupancy = m.slot_steps > 0 ? double(m.tokens) / double(m.slot_steps) : 0.0;
    const double syncs_per_token = double(m.host_syncs) / double(std::max<int64_t>(1, m.tokens));
    char line[512];
    std::snprintf(line, sizeof line, "| %lld | %s | %.0f | %lld | %.2f | %.2f | %.3f |\n",
                  static_cast<long long>(results_rows[i]), m.engine.c_str(), tokens_per_s,
                  static_cast<long long>(m.decode_steps), step_ms, occupancy, syncs_per_token);
    std::cout << line;
    runs.push_back({{"rows", results_rows[i]}, {"engine", m.engine}, {"cuda_graphs", m.cuda_graphs}, {"lagged_look", m.lagged_look}, {"slots", m.slots}, {"tokens", m.tokens},
                    {"seconds", m.seconds}, {"tokens_per_s", tokens_per_s}, {"decode_steps", m.decode_steps},
                    {"ms_per_decode_step", step_ms}, {"slot_occupancy", occupancy}, {"host_syncs_per_token", syncs_per_token}});
    if (!m.profile.is_null()) {  // the profile's headline figures; the rest in its file
      nlohmann::json headline;
      for (const char* key : {"file", "host_operator_calls_per_step", "device_busy_share", "kernels_per_step",
                              "kernel_launches_per_step", "graph_launches_per_step", "host_waits_per_step"})
        if (m.profile.contains(key)) headline[key] = m.profile[key];
      runs.back()["profile"] = headline;
    }
  }
  if (!json_out.empty()) {
    const nlohmann::json j = {{"model_json", model_json}, {"device", device_name}, {"dtype", dtype_name}, {"cpu_runs_table", table_name},
                              {"tokens", tokens}, {"short_tokens", short_tokens}, {"prompt_tokens", prompt_tokens},
                              {"greedy", greedy}, {"weight_bytes", weight_bytes}, {"read_bytes_per_s", read_rate},
                              {"floor_ms_per_decode_step", 1e3 * weight_bytes / read_rate}, {"runs", runs}};
    write_text_atomically(json_out, j.dump(2) + "\n");
  }
  return 0;
}

}  // namespace rayless::cli
