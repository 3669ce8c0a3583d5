// rayless-bench zero-memory: what one rank holds for training at each ZeRO stage, counted exactly
// from the model's parameter tensors and the sharded optimizer's layout (ShardLayout, the same code
// the trainer runs), for a config.json and several world sizes. Builds the model once (its weights
// are never trained) and prints a Markdown table for docs/benchmarks.md.
#include <torch/types.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/model/model.h"
#include "rayless/trainer/zero_optimizer.h"

namespace rayless::cli {

namespace {
std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}
}  // namespace

int bench_zero_memory(const Args& args) {
  po::options_description options("rayless-bench zero-memory");
  std::string config_json, dtype_name = "float32", ranks_text = "1,2,4";
  int64_t bucket_mb = 4;
  options.add_options()
      ("config-json", po::value(&config_json)->required(), "HF config.json describing the architecture")
      ("dtype", po::value(&dtype_name)->default_value(dtype_name), "float32 | bfloat16 (weights, gradients and AdamW moments)")
      ("ranks", po::value(&ranks_text)->default_value(ranks_text), "world sizes, comma-separated")
      ("bucket-mb", po::value(&bucket_mb)->default_value(bucket_mb), "distributed.bucket_size_mb");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench zero-memory --config-json FILE [--dtype float32|bfloat16] [--ranks 1,2,4]",
                     options, vm))
    return kExitOk;
  inputCheck(dtype_name == "float32" || dtype_name == "bfloat16", "--dtype: float32 or bfloat16, got ", dtype_name);
  nlohmann::json raw = read_json_file(config_json);
  if (!raw.contains("vocab_size") || raw["vocab_size"].is_null()) raw["vocab_size"] = 261;  // the byte tokenizer's
  const ModelArchConfig arch = ModelArchConfig::from_json(raw, config_json);
  torch::NoGradGuard no_grad;
  CausalLM model(arch);  // float32 weights; only their shapes matter here
  const std::vector<torch::Tensor> parameters = model->parameters();
  const int64_t element = dtype_name == "float32" ? 4 : 2;
  int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  const int64_t bucket_elements = bucket_mb * 1024 * 1024 / element;

  std::cout << "zero-memory: " << config_json << ", " << numel << " parameters in " << parameters.size()
            << " tensors, " << dtype_name << ", buckets of " << bucket_mb << " MiB; MiB per rank (the largest rank)\n\n"
            << "| ranks | stage | parameters | gradients | AdamW moments | total | vs stage 0 |\n"
            << "| --- | --- | --- | --- | --- | --- | --- |\n";
  std::stringstream list(ranks_text);
  for (std::string item; std::getline(list, item, ',');) {
    const int world = std::stoi(item);
    inputCheck(world >= 1, "--ranks: ", item);
    int64_t shard = 0;  // the largest rank's slice elements (ranks differ only by padding)
    for (int rank = 0; rank < world; ++rank)
      shard = std::max(shard, ShardLayout(parameters, world, rank, bucket_elements).shard_elements());
    const int64_t weights = numel * element;
    int64_t stage0_total = 0;
    for (int stage = 0; stage <= 2; ++stage) {
      const int64_t gradients = stage == 2 ? shard * element : weights;
      const int64_t moments = 2 * (stage == 0 ? numel : shard) * element;
      const int64_t total = weights + gradients + moments;
      if (stage == 0) stage0_total = total;
      char ratio[16];
      std::snprintf(ratio, sizeof ratio, "%.2f", static_cast<double>(total) / static_cast<double>(stage0_total));
      std::cout << "| " << world << " | " << stage << " | " << mib(weights) << " | " << mib(gradients) << " | "
                << mib(moments) << " | " << mib(total) << " | " << ratio << " |\n";
    }
  }
  return kExitOk;
}

}  // namespace rayless::cli
