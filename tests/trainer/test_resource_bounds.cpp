#include <catch2/catch.hpp>

#include <limits>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/trainer/resource_bounds.h"

using namespace rayless;

namespace {
ModelArchConfig arch_from(const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = {{"model_type", "qwen2"}, {"vocab_size", 272}, {"hidden_size", 256}, {"intermediate_size", 704},
                      {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"max_position_embeddings", 2048}, {"tie_word_embeddings", true}};
  j.update(extra);
  return ModelArchConfig::from_json(j, "config.json");
}
}  // namespace

TEST_CASE("position_limit: max_position_embeddings, scaled as vLLM derives a model's length") {
  CHECK(position_limit(arch_from()) == 2048);
  CHECK(position_limit(arch_from({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}})) == 4096);
  CHECK(position_limit(arch_from({{"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 4.0}}}})) == 8192);
  CHECK(position_limit(arch_from({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 1024}}}})) == 4096);
  CHECK(position_limit(arch_from({{"max_position_embeddings", 8192},
                                  {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                                                    {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 1024}}}})) == 8192);
}

TEST_CASE("check_training_positions: the longest prompt + completion beyond the model's positions is refused, naming both keys") {
  Config c;
  c.data.max_prompt_length = 256;  // a bound, not a length: the dataset's longest prompt counts
  c.generation.max_completion_length = 2000;
  CHECK_NOTHROW(check_training_positions(c, arch_from(), "m", 48));
  c.generation.max_completion_length = 2001;
  CHECK_THROWS_WITH(check_training_positions(c, arch_from(), "m", 48),
                    "the longest prompt of data.path (48 tokens; data.max_prompt_length 256) + generation.max_completion_length "
                    "2001 = 2049 positions, more than the 2048 the model is made for (m/config.json: max_position_embeddings "
                    "2048): lower generation.max_completion_length or data.max_prompt_length (with data.truncation = \"left\")");
}

TEST_CASE("check_configured_positions: config check refuses a completion that leaves no room and warns about the prompt bound") {
  Config c;
  c.data.max_prompt_length = 48;
  c.generation.max_completion_length = 2000;
  CHECK(check_configured_positions(c, arch_from(), "m").empty());
  c.data.max_prompt_length = 256;
  CHECK(check_configured_positions(c, arch_from(), "m") ==
        "data.max_prompt_length 256 + generation.max_completion_length 2000 = 2256 positions, more than the 2048 the model "
        "is made for (m/config.json: max_position_embeddings 2048): rayless train refuses a dataset whose longest prompt "
        "has more than 48 tokens");
  c.generation.max_completion_length = 2048;
  CHECK_THROWS_WITH(check_configured_positions(c, arch_from(), "m"),
                    "generation.max_completion_length 2048 leaves no position for a prompt: the model is made for 2048 "
                    "(m/config.json: max_position_embeddings 2048): lower it");
}

TEST_CASE("memory estimates: the KV cache and weights by hand, saturating instead of wrapping, refused in one line") {
  const ModelArchConfig arch = arch_from();
  const MemoryEstimate g = generation_memory(arch, torch::kFloat32, 3, 100);
  // 2 (k, v) x 4 layers x 2 kv heads x 64 dims x 100 positions x 3 rows x 4 bytes
  CHECK(g.parts[1].second == 2 * 4 * 2 * 64 * 100 * 3 * 4);
  CHECK(g.parts[0].second == arch.num_parameters() * 4);
  const MemoryEstimate huge = generation_memory(arch, torch::kFloat32, 1, std::numeric_limits<int64_t>::max() / 2);
  CHECK(huge.total() == std::numeric_limits<int64_t>::max());
  Config c;
  c.train.bf16 = false;
  c.train.per_device_train_batch_size = 4;
  c.grpo.steps_per_generation = 2;
  const MemoryEstimate t = training_memory(c, arch, 2);
  CHECK(t.total() > g.parts[0].second * 4);  // weights, gradients and two moments at least
  CHECK_NOTHROW(check_memory_fits(t, {t.total(), "enough"}, "a rank", "less"));
  CHECK_NOTHROW(check_memory_fits(t, {}, "a rank", "less"));  // unknown: nothing refused
  CHECK_THROWS_WITH(check_memory_fits(g, {1024, "host MemAvailable 1.0 KiB"}, "generate", "lower --max-new-tokens"),
                    Catch::StartsWith("generate needs at least ") && Catch::Contains("(weights 11.5 MiB, KV cache (3 rows x 100 positions) 1.2 MiB, logits 3.2 KiB)") &&
                        Catch::EndsWith("and has 1.0 KiB (host MemAvailable 1.0 KiB): lower --max-new-tokens"));
}

// The clause an out-of-memory message carries names the settings that bound the phase, as they are in force.
TEST_CASE("memory_bounds: the log-prob pass in pieces along the sequence, the slots that hold the KV cache") {
  Config c;
  c.data.max_prompt_length = 64;
  c.generation.max_completion_length = 4096;
  c.train.per_device_train_batch_size = 4;
  c.grpo.steps_per_generation = 2;
  const std::string pieces = memory_bounds(c, arch_from(), 1, MemoryUse::LogprobPass);
  INFO(pieces);
  CHECK_THAT(pieces, Catch::StartsWith("8 rows x up to 4160 positions in pieces of 2048, hidden states "));
  CHECK_THAT(pieces, Catch::Contains(", KV cache ") && Catch::EndsWith(", grpo.logprob_sequence_chunk_size 2048"));
  c.grpo.logprob_sequence_chunk_size = 0;
  CHECK_THAT(memory_bounds(c, arch_from(), 1, MemoryUse::LogprobPass), Catch::StartsWith("8 rows x up to 4160 positions in one pass"));

  const std::string all_rows = memory_bounds(c, arch_from(), 1, MemoryUse::Sampling);
  CHECK_THAT(all_rows, Catch::StartsWith("8 rows x 4160 positions") && Catch::EndsWith("generation.slots auto, generation.prefill_chunk auto"));
  c.generation.slots = 3;
  c.generation.prefill_chunk = 512;
  const std::string three = memory_bounds(c, arch_from(), 1, MemoryUse::Sampling);
  CHECK_THAT(three, Catch::StartsWith("3 rows x 4160 positions") && Catch::EndsWith("generation.slots 3, generation.prefill_chunk 512"));
}
