// rayless export --merge: a LoRA adapter (a LoRA run's checkpoint, or PEFT's save_pretrained output)
// folded into its base model, written as a plain HF model directory (transformers loads it without
// PEFT), with the base's tokenizer files.
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/options.h"
#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/hf/model_directory.h"
#include "rayless/hf/peft_adapter.h"
#include "rayless/model/lora.h"
#include "rayless/hf/tokenizer.h"

namespace fs = std::filesystem;

namespace rayless::cli {

int export_model(const Args& args) {
  po::options_description options("rayless export");
  std::string adapter_dir, base_dir, output_dir, dtype_name;
  int64_t init_seed = ModelConfig().init_seed;
  options.add_options()
      ("merge", "merge the adapter into the base weights (W + scaling B A), as PEFT's merge_and_unload")
      ("adapter", po::value(&adapter_dir)->required(), "LoRA adapter directory (adapter_config.json + adapter_model.safetensors)")
      ("model", po::value(&base_dir)->default_value(""), "base model directory (default: the adapter's base_model_name_or_path)")
      ("output", po::value(&output_dir)->required(), "directory to write (must not exist)")
      ("dtype", po::value(&dtype_name)->default_value("float32"), "float32 | bfloat16 | float64: the merge is computed and saved in it")
      ("init-seed", po::value(&init_seed)->default_value(init_seed),
       "initialises a base directory without weights: the run's model.init_seed");
  po::variables_map vm;
  if (!parse_options(args, "rayless export --merge --adapter DIR --output DIR [--model BASE]", options, vm)) return 0;
  inputCheck(vm.count("merge"), "export: say --merge (the only export there is: adapter merged into its base)");
  inputCheck(is_lora_adapter_directory(adapter_dir), "export: ", adapter_dir, " has no adapter_config.json");
  std::string named_base;
  read_lora_config(adapter_dir, &named_base);
  if (base_dir.empty()) base_dir = named_base;
  inputCheck(!base_dir.empty(), "export: ", (fs::path(adapter_dir) / "adapter_config.json").string(),
             " names no base_model_name_or_path: give --model");
  inputCheck(fs::exists(fs::path(base_dir) / "config.json"), "export: base model ", base_dir, " has no config.json");
  inputCheck(!fs::exists(output_dir), "export: ", output_dir, " already exists (choose a new --output directory)");
  const ModelDtype dtype = parse_choice<ModelDtype>(dtype_name, "--dtype");
  inputCheck(dtype == ModelDtype::Float32 || dtype == ModelDtype::BFloat16 || dtype == ModelDtype::Float64,
             "export: --dtype float32, bfloat16 or float64 (float16 is for GPUs)");

  inputCheck(init_seed >= 0, "export: --init-seed ", init_seed, " is not allowed: expected an integer >= 0");
  CausalLM model = load_hf_model(base_dir, torch_dtype_of(dtype), torch::kCPU, static_cast<uint64_t>(init_seed));
  load_lora_adapter(model, adapter_dir);
  merge_lora_adapters(model);
  // the base's tokenizer travels with the merged model when it has one
  std::shared_ptr<Tokenizer> tokenizer;
  if (fs::exists(fs::path(base_dir) / "tokenizer.json")) tokenizer = load_tokenizer("", base_dir);
  save_hf_directory(model, tokenizer.get(), output_dir);
  std::cout << "export: " << adapter_dir << " merged into " << base_dir << " -> " << output_dir << std::endl;
  return 0;
}

}  // namespace rayless::cli
