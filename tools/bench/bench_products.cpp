// rayless-bench products: generation's weight products (fused q/k/v, o, fused gate/up, down) of a model
// shape, through GenerationLinear as generate() runs them, at a few row counts. Each product reads its
// own copy of the weight from a pool of --pool-mb MB: small enough and the weights stay in the
// last-level cache (as a 53M model's 107 MB bfloat16 copy does on the benchmark machine), larger and
// they come from memory (docs/notes/bench-xeon.md, "AMX tiles for the decode step's products").
// RAYLESS_AMX=0 measures oneDNN's kernel where the AMX tiles would run.
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/model/model.h"
#include "rayless/ops/ops.h"

namespace rayless::cli {

namespace {
struct Product {
  const char* name;
  std::vector<int64_t> outputs;  // the fused parts' rows
  int64_t inputs;
};
}  // namespace

int bench_products(const Args& args) {
  po::options_description options("rayless-bench products");
  std::string config_json, rows_list;
  double pool_mb = 100;
  bool bf16 = false;
  options.add_options()("config-json", po::value(&config_json)->required(), "HF config.json of the model shape")(
      "rows", po::value(&rows_list)->default_value("1,16"), "rows per product, comma-separated")(
      "pool-mb", po::value(&pool_mb)->default_value(100), "MB of weight copies each product cycles through")(
      "bf16", po::bool_switch(&bf16), "bfloat16 products, as generation under train.bf16 runs them");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench products --config-json FILE [--rows 1,16] [--pool-mb MB] [--bf16]", options, vm))
    return 0;
  const ModelArchConfig c = ModelArchConfig::from_json(read_json_file(config_json), config_json);
  const std::vector<int64_t> row_counts = parse_rows(rows_list, "bench products");
  inputCheck(pool_mb > 0 && pool_mb <= 16384, "bench products: --pool-mb must be in (0, 16384], got ", pool_mb);
  c10::InferenceMode inference;
  const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
  const double element_bytes = bf16 ? 2 : 4;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const std::vector<Product> products{{"q/k/v", {q, kv, kv}, c.hidden_size},
                                      {"o", {c.hidden_size}, q},
                                      {"gate/up", {c.intermediate_size, c.intermediate_size}, c.hidden_size},
                                      {"down", {c.hidden_size}, c.intermediate_size}};
  std::printf("%s products, %d thread(s), each weight copy read from a pool of %.0f MB\n\n", bf16 ? "bfloat16" : "float32",
              at::get_num_threads(), pool_mb);
  std::printf("| product | [out, in] | kernel | rows | µs per product | GB/s of weight |\n|---|---|---|---|---|---|\n");
  for (const auto& product : products) {
    int64_t out = 0;
    for (const int64_t part : product.outputs) out += part;
    const double weight_bytes = double(out) * double(product.inputs) * element_bytes;
    const int copies = std::max(1, static_cast<int>(pool_mb * 1e6 / weight_bytes));
    std::vector<std::vector<torch::Tensor>> parts(copies);  // GenerationLinear keeps references to its parts
    std::vector<ops::GenerationLinear> pool;
    for (auto& copy : parts) {
      for (const int64_t rows : product.outputs) copy.push_back(0.05 * torch::randn({rows, product.inputs}));
      pool.emplace_back(copy, std::vector<torch::Tensor>(copy.size()), dtype);
    }
    for (const int64_t rows : row_counts) {
      const auto x = torch::randn({rows, product.inputs}).to(dtype);
      double best = 1e9;
      for (int pass = 0; pass < 5; ++pass) {
        const auto start = BenchClock::now();
        for (const auto& linear : pool) linear(x);
        best = std::min(best, seconds_since(start) / copies);
      }
      std::printf("| %s | [%lld, %lld] | %s | %lld | %.1f | %.1f |\n", product.name, (long long)out,
                  (long long)product.inputs, pool.front().kernel(), (long long)rows, best * 1e6, weight_bytes / best / 1e9);
    }
  }
  return 0;
}

}  // namespace rayless::cli
