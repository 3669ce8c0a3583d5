// rayless-bench long-completions: the memory one phase of a GRPO step takes for completions of a given
// length (issue 51), in a process of its own so that the peak is that phase's alone:
//   generate        KV-cached sampling of --rows completions of exactly --length tokens (no EOS)
//   logprobs        the old/reference log-prob pass over them (no gradients)
//   train           the training pass: log-probs with gradients, then backward of their sum
//   train-ckpt      the same with gradient checkpointing
// The model is built from --config-json (tools/bench/models/small.json by default) with random weights
// and max_position_embeddings raised to fit. Memory is the rise of the peak resident set during the
// phase: /proc/self/clear_refs resets the peak after the model is built, VmHWM is read after the phase.
// tools/bench/long_completions.sh runs the grid and prints the table in docs/long-completions.md.
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/base/error.h"
#include "rayless/ops/autocast_scope.h"
#include "rayless/grpo/completion_logprobs.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/sampler/sampler.h"
#include "rayless/sampler/sampling_stream.h"

namespace rayless::cli {
namespace {

int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

// Resets the peak resident set to the current one (Linux >= 4.0).
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

}  // namespace

int bench_long_completions(const Args& args) {
  po::options_description options("rayless-bench long-completions");
  std::string config_json = "tools/bench/models/small.json", phase;
  int64_t length = 4096, rows = 1, prompt = 64, chunk = 256, sequence_chunk = -1;
  bool bf16 = false;
  options.add_options()
      ("phase", po::value(&phase)->required(), "generate | logprobs | train | train-ckpt")
      ("length", po::value(&length)->default_value(length), "completion tokens")
      ("rows", po::value(&rows)->default_value(rows), "completions")
      ("prompt", po::value(&prompt)->default_value(prompt), "prompt tokens")
      ("chunk", po::value(&chunk)->default_value(chunk), "LM-head chunk (grpo.logprob_chunk_size)")
      ("sequence-chunk", po::value(&sequence_chunk)->default_value(sequence_chunk),
       "completion positions per pass of the log-prob pass (grpo.logprob_sequence_chunk_size; -1: its default)")
      ("bf16", po::bool_switch(&bf16), "bfloat16 autocast (train.bf16)")
      ("config-json", po::value(&config_json)->default_value(config_json), "HF config.json of the architecture");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench long-completions --phase P [--length T] [--rows B]", options, vm)) return kExitOk;
  inputCheck(phase == "generate" || phase == "logprobs" || phase == "train" || phase == "train-ckpt",
             "long-completions: --phase must be generate, logprobs, train or train-ckpt, got \"", phase, "\"");
  inputCheck(length >= 1 && rows >= 1 && prompt >= 1 && chunk >= 1, "long-completions: lengths, rows and chunks must be >= 1");

  const auto tokenizer = load_tokenizer("byte");
  nlohmann::json raw = read_json_file(config_json);
  raw["vocab_size"] = tokenizer->vocab_size();
  raw["max_position_embeddings"] = prompt + length + 1;
  const ModelArchConfig arch = ModelArchConfig::from_json(raw, config_json);
  CausalLM model(arch);
  model->init_weights(1234);
  torch::manual_seed(7);
  // prompt and completion tokens drawn below the byte tokenizer's special ids (none ends a row)
  const torch::Tensor prompt_ids = torch::randint(0, 256, {prompt}, torch::kInt64);
  const std::vector<int64_t> one_prompt(prompt_ids.data_ptr<int64_t>(), prompt_ids.data_ptr<int64_t>() + prompt);
  const std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(rows), one_prompt);
  const torch::Tensor completion_ids = torch::randint(0, 256, {rows, length}, torch::kInt64);
  const torch::Tensor completion_mask = torch::ones({rows, length}, torch::kFloat32);

  const int64_t before_kib = status_kib("VmRSS");
  reset_peak_rss();
  const auto start = BenchClock::now();
  const ops::AutocastScope autocast(bf16, torch::kCPU);
  if (phase == "generate") {
    SamplingParams params;
    params.max_new_tokens = length;
    params.num_generations = rows;  // one prompt, as GRPO's group shares one
    params.greedy = true;
    params.pad_id = tokenizer->pad_id();  // no eos ids: every row runs to `length`
    const GenerationOutput out = generate(model, {one_prompt}, params, SamplingStream(1));
    runtimeCheck(out.completion_ids.size(1) == length, "long-completions: generated ", out.completion_ids.size(1), " tokens");
  } else {
    CompletionLogprobOptions o;
    o.pad_id = tokenizer->pad_id();
    o.chunk_positions = chunk;
    if (sequence_chunk >= 0) o.sequence_chunk = sequence_chunk;
    if (phase == "logprobs") {
      torch::NoGradGuard no_grad;
      model->eval();
      completion_logprobs(model, prompts, completion_ids, completion_mask, o);
    } else {
      model->train();
      model->set_gradient_checkpointing(phase == "train-ckpt");
      const ops::LogprobsAndEntropies out = completion_logprobs(model, prompts, completion_ids, completion_mask, o);
      out.logps.sum().backward();
    }
  }
  const double seconds = seconds_since(start);
  const int64_t peak_kib = status_kib("VmHWM");
  nlohmann::json result = {{"phase", phase},
                           {"length", length},
                           {"rows", rows},
                           {"prompt", prompt},
                           {"bf16", bf16},
                           {"chunk", chunk},
                           {"sequence_chunk", sequence_chunk},
                           {"seconds", seconds},
                           {"peak_extra_mib", static_cast<double>(peak_kib - before_kib) / 1024.0},
                           {"model_parameters", arch.num_parameters()},
                           {"layers", arch.num_hidden_layers},
                           {"hidden", arch.hidden_size},
                           {"kv_heads", arch.num_key_value_heads},
                           {"head_dim", arch.head_dim}};
  std::cout << result.dump() << std::endl;
  return kExitOk;
}

}  // namespace rayless::cli
