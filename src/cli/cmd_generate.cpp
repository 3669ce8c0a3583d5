// rayless generate: load a model directory, sample one completion for a prompt, print it (or a JSON
// object with ids and per-token log-probs). Uses the same sampler as the trainer.
#include <algorithm>
#include <iostream>
#include <limits>
#include <tuple>

#include <torch/cuda.h>

#include "cli/options.h"
#include "rayless/base/config.h"
#include "rayless/base/failure_message.h"
#include "rayless/base/log.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/peft_adapter.h"
#include "rayless/model/lora.h"
#include "rayless/prompts/dataset.h"
#include "rayless/prompts/prompt_builder.h"
#include "rayless/sampler/sampler.h"
#include "rayless/hf/tokenizer.h"
#include "rayless/runtime/available_memory.h"
#include "rayless/trainer/resource_bounds.h"

namespace rayless::cli {

namespace {

// The sampling flags accept exactly what the config's [generation] keys accept: each goes through
// the config's field table, and a refusal names the flag.
GenerationConfig generation_from_flags(int64_t max_new_tokens, const std::string& temperature, const std::string& top_k,
                                       const std::string& top_p, const std::string& min_p,
                                       const std::string& repetition_penalty) {
  Config config;
  config.generation.max_completion_length = std::max<int64_t>(1, max_new_tokens);
  for (const auto& [flag, key, value] : {std::tuple<const char*, const char*, std::string>{"temperature", "generation.temperature", temperature},
                                         {"top-k", "generation.top_k", top_k},
                                         {"top-p", "generation.top_p", top_p},
                                         {"min-p", "generation.min_p", min_p},
                                         {"repetition-penalty", "generation.repetition_penalty", repetition_penalty}}) {
    try {
      apply_override(config, str(key, "=", value));
    } catch (const InputError&) {  // the field's range, named by the flag (not as a --set of the key)
      std::string allowed;
      for (const ConfigField& field : config_fields())
        if (field.name == key) allowed = field.allowed;
      throw InputError(str("generate: --", flag, " ", value, " is not allowed: expected ", allowed, " (as ", key, ")"));
    }
  }
  return config.generation;
}

}  // namespace

int generate(const Args& args) {
  po::options_description options("rayless generate");
  std::string model_dir, adapter_dir, prompt, dtype_name, device_name;
  TokenizerConfig tokenizer_config;
  int64_t max_new_tokens = 32, seed = 0, init_seed = ModelConfig().init_seed;
  std::string temperature, top_k, top_p, min_p, repetition_penalty;  // checked by the config's table
  options.add_options()
      ("model", po::value(&model_dir)->default_value("configs/models/tiny"), "HF model directory")
      ("adapter", po::value(&adapter_dir)->default_value(""), "a LoRA adapter directory (PEFT's files, or a LoRA run's checkpoint) to apply to --model")
      ("tokenizer", po::value(&tokenizer_config.path)->default_value(""), "tokenizer.json, or \"byte\" (default: the model directory's)")
      ("prompt", po::value(&prompt)->required(), "prompt text")
      ("chat-template", po::value(&tokenizer_config.chat_template)->default_value("auto"),
       "auto (the prompt as is, as TRL) | none | chatml | a .jinja file | an inline template: wraps the prompt as a user message")
      ("system-prompt", po::value(&tokenizer_config.system_prompt)->default_value(""), "system message when the prompt is wrapped")
      ("max-new-tokens", po::value(&max_new_tokens)->default_value(32), "completion length limit")
      ("greedy", "pick the most likely token (same as --temperature 0)")
      ("temperature", po::value(&temperature)->default_value("1"), "sampling temperature (generation.temperature)")
      ("top-k", po::value(&top_k)->default_value("0"), "keep the k most likely tokens, 0 = off (generation.top_k)")
      ("top-p", po::value(&top_p)->default_value("1"), "nucleus sampling mass in [0, 1], 1 = off (generation.top_p)")
      ("min-p", po::value(&min_p)->default_value("0"), "drop tokens below min_p x the top probability, 0 = off (generation.min_p)")
      ("repetition-penalty", po::value(&repetition_penalty)->default_value("1"), "HF repetition penalty, 1 = off (generation.repetition_penalty)")
      ("seed", po::value(&seed)->default_value(0), "sampling seed")
      ("init-seed", po::value(&init_seed)->default_value(init_seed),
       "initialises a model directory without weights, as model.init_seed does for train and export")
      ("dtype", po::value(&dtype_name)->default_value("float32"), "float32 | bfloat16 | float16 (GPU)")
      ("device", po::value(&device_name)->default_value("cpu"), "cpu | cuda")
      ("json", "print one JSON object: prompt ids, completion ids, text, per-token log-probs");
  po::variables_map vm;
  if (!parse_options(args, "rayless generate --model DIR [--adapter DIR] --prompt TEXT [--max-new-tokens N] [--greedy] [--json]", options, vm))
    return 0;
  inputCheck(max_new_tokens >= 0, "generate: --max-new-tokens must be >= 0");
  inputCheck(seed >= 0, "generate: --seed ", seed, " is not allowed: expected an integer >= 0");
  inputCheck(init_seed >= 0, "generate: --init-seed ", init_seed, " is not allowed: expected an integer >= 0");
  const GenerationConfig generation = generation_from_flags(max_new_tokens, temperature, top_k, top_p, min_p,
                                                         repetition_penalty);
  inputCheck(!vm.count("greedy") || vm["temperature"].defaulted() || generation.temperature == 0.0,
             "generate: --greedy and --temperature ", temperature,
             " contradict each other (--greedy is --temperature 0): pass one");
  inputCheck(device_name == "cpu" || device_name == "cuda", "generate: --device must be cpu or cuda");
  inputCheck(device_name == "cpu" || torch::cuda::is_available(), "generate: --device cuda but no CUDA device is available");
  const torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
  const ModelDtype dtype = parse_choice<ModelDtype>(dtype_name, "--dtype");
  inputCheck(!(dtype == ModelDtype::Float16 && device.is_cpu()), "generate: --dtype float16 is for GPUs only (--device cuda)");

  // bounds before memory: the prompt is tokenized first, then the sequence is checked against the
  // model (transformers' generate warns past max_position_embeddings and goes on; so does this) and
  // its KV cache against the memory there is, before the weights are loaded
  const ModelArchConfig arch = load_model_config(model_dir);
  auto tokenizer = load_tokenizer(tokenizer_config.path, model_dir);
  inputCheck(tokenizer->vocab_size() <= arch.vocab_size, "generate: the tokenizer has ", tokenizer->vocab_size(),
             " tokens but the model's vocab_size is ", arch.vocab_size);

  // the trainer's prompt path (tokenizer.chat_template semantics), so a sample here is one it would draw
  PromptRow row;
  row.prompt = prompt;
  const PromptTokens built = build_prompt(row, prompt_format_from_config(tokenizer_config, model_dir), *tokenizer,
                                          std::numeric_limits<int64_t>::max(), PromptTruncation::Error, "--prompt");
  const std::string& text = built.text;
  const std::vector<int64_t>& prompt_ids = built.ids;
  inputCheck(!prompt_ids.empty(), "generate: the prompt encodes to no tokens");
  const int64_t positions = static_cast<int64_t>(prompt_ids.size()) + max_new_tokens;
  check_memory_fits(generation_memory(arch, torch_dtype_of(dtype), 1, positions), available_memory(device, 1),
                    "generate", "lower --max-new-tokens");
  if (positions > position_limit(arch))
    log_warn(str("generate: the prompt's ", prompt_ids.size(), " tokens + --max-new-tokens ", max_new_tokens, " = ",
                 positions, " positions, more than the ", position_limit(arch), " the model is made for (", model_dir,
                 "/config.json: max_position_embeddings ", arch.max_position_embeddings,
                 "); past them the output may degrade (transformers warns the same and goes on)"));

  const MemoryPhase loading("loading the model");
  CausalLM model = load_hf_model(model_dir, torch_dtype_of(dtype), device, static_cast<uint64_t>(init_seed));
  if (!adapter_dir.empty()) load_lora_adapter(model, adapter_dir);

  SamplingParams params = sampling_params_from_config(generation, *tokenizer);
  params.max_new_tokens = max_new_tokens;
  params.greedy = params.greedy || vm.count("greedy") > 0;
  params.return_logprobs = true;
  const SamplingStream stream(static_cast<uint64_t>(seed));
  const MemoryPhase generating(str("generating up to ", max_new_tokens, " tokens"));
  const GenerationOutput out = generate(model, {prompt_ids}, params, stream, tokenizer.get());

  std::vector<int64_t> completion;
  std::vector<double> logprobs;
  for (int64_t t = 0; t < out.completion_ids.size(1); ++t) {
    if (out.completion_mask[0][t].item<int64_t>() == 0) break;
    completion.push_back(out.completion_ids[0][t].item<int64_t>());
    logprobs.push_back(out.logprobs[0][t].item<double>());
  }
  const std::string completion_text = tokenizer->decode(completion, /*skip_special_tokens=*/true);
  if (vm.count("json")) {
    nlohmann::json j = {{"prompt", text},
                        {"prompt_ids", prompt_ids},
                        {"completion_ids", completion},
                        {"text", completion_text},
                        {"logprobs", logprobs},
                        {"truncated", out.truncated[0].item<bool>()}};
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << completion_text << std::endl;
  }
  return 0;
}

}  // namespace rayless::cli
