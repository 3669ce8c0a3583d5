#include "rayless/trainer/resource_bounds.h"

#include <algorithm>
#include <limits>

#include "rayless/base/error.h"

namespace rayless {
namespace {

int64_t element_bytes(torch::Dtype dtype) { return static_cast<int64_t>(c10::elementSize(dtype)); }

// a * b * ..., saturating at int64's maximum (a length of 10^9 must not wrap around)
int64_t product(std::initializer_list<int64_t> factors) {
  long double p = 1;
  for (int64_t f : factors) p *= static_cast<long double>(std::max<int64_t>(f, 0));
  return p >= static_cast<long double>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                             : static_cast<int64_t>(p);
}

int64_t kv_cache_bytes(const ModelArchConfig& arch, int64_t element, int64_t rows, int64_t positions) {
  return product({2, arch.num_hidden_layers, arch.num_key_value_heads, arch.head_dim, positions, rows, element});
}

}  // namespace

int64_t position_limit(const ModelArchConfig& arch) {
  const RopeConfig& rope = arch.rope;
  switch (rope.type) {
    case RopeType::Linear:
    case RopeType::Dynamic:
      return static_cast<int64_t>(static_cast<double>(arch.max_position_embeddings) * rope.factor);
    case RopeType::Yarn: {
      const int64_t base = rope.original_max_position_embeddings > 0 ? rope.original_max_position_embeddings
                                                                     : arch.max_position_embeddings;
      return std::max(arch.max_position_embeddings, static_cast<int64_t>(static_cast<double>(base) * rope.factor));
    }
    default: return arch.max_position_embeddings;
  }
}

namespace {
// "(DIR/config.json: max_position_embeddings N[, rope_scaling TYPE])"
std::string limit_source(const ModelArchConfig& arch, const std::string& model_dir) {
  const bool scaled = arch.rope.type != RopeType::Default && arch.rope.type != RopeType::Llama3;
  return str("(", model_dir, "/config.json: max_position_embeddings ", arch.max_position_embeddings,
             scaled ? str(", rope_scaling ", RopeConfig::name(arch.rope.type)) : std::string(), ")");
}
}  // namespace

void check_training_positions(const Config& config, const ModelArchConfig& arch, const std::string& model_dir,
                              int64_t longest_prompt) {
  const int64_t limit = position_limit(arch);
  const int64_t wanted = longest_prompt + config.generation.max_completion_length;
  inputCheck(limit <= 0 || wanted <= limit, "the longest prompt of data.path (", longest_prompt,
             " tokens; data.max_prompt_length ", config.data.max_prompt_length, ") + generation.max_completion_length ",
             config.generation.max_completion_length, " = ", wanted, " positions, more than the ", limit,
             " the model is made for ", limit_source(arch, model_dir),
             ": lower generation.max_completion_length or data.max_prompt_length (with data.truncation = \"left\")");
}

std::string check_configured_positions(const Config& config, const ModelArchConfig& arch, const std::string& model_dir) {
  const int64_t limit = position_limit(arch);
  if (limit <= 0) return "";
  const int64_t completion = config.generation.max_completion_length;
  inputCheck(completion < limit, "generation.max_completion_length ", completion, " leaves no position for a prompt: the model is made for ",
             limit, " ", limit_source(arch, model_dir), ": lower it");
  const int64_t wanted = config.data.max_prompt_length + completion;
  if (wanted <= limit) return "";
  return str("data.max_prompt_length ", config.data.max_prompt_length, " + generation.max_completion_length ", completion,
             " = ", wanted, " positions, more than the ", limit, " the model is made for ", limit_source(arch, model_dir),
             ": rayless train refuses a dataset whose longest prompt has more than ", limit - completion, " tokens");
}

int64_t MemoryEstimate::total() const {
  int64_t sum = 0;
  for (const auto& [what, bytes] : parts) sum = std::numeric_limits<int64_t>::max() - sum < bytes ? std::numeric_limits<int64_t>::max() : sum + bytes;
  return sum;
}

std::string MemoryEstimate::describe() const {
  auto sorted = parts;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [what, bytes] : sorted)
    if (bytes > 0) out += str(out.empty() ? "" : ", ", what, " ", bytes_text(static_cast<double>(bytes)));
  return out;
}

namespace {
// The rows whose KV cache the engine's slots hold at once: every row of the generation batch unless
// generation.slots is lower.
int64_t rows_in_slots(const Config& c, int64_t batch_rows) {
  return c.generation.slots > 0 ? std::min(c.generation.slots, batch_rows) : batch_rows;
}
}  // namespace

MemoryEstimate training_memory(const Config& c, const ModelArchConfig& arch, int64_t world_size) {
  const torch::Dtype dtype = torch_dtype_of(c.model.dtype);
  const int64_t element = element_bytes(dtype);
  // under train.bf16 the activations and the generation's keys and values are bfloat16
  const int64_t activation = c.train.bf16 && element > 2 ? 2 : element;
  const int64_t parameters = arch.num_parameters();
  const int64_t positions = c.data.max_prompt_length + c.generation.max_completion_length;
  const int64_t batch_rows = c.train.per_device_train_batch_size * c.effective_steps_per_generation(world_size);
  const int64_t generation_rows = rows_in_slots(c, batch_rows);
  const int64_t micro_rows = c.train.per_device_train_batch_size;
  MemoryEstimate e;
  e.parts.push_back({"weights", product({parameters, element, c.grpo.beta > 0 && !c.lora.enabled ? 2 : 1})});
  if (!c.lora.enabled) {  // adapters are small next to the rest
    const int64_t shards = world_size > 0 ? world_size : 1;
    e.parts.push_back({"gradients", product({parameters, element}) / (c.distributed.zero_stage >= 2 ? shards : 1)});
    e.parts.push_back({"AdamW moments", product({2, parameters, element}) / (c.distributed.zero_stage >= 1 ? shards : 1)});
  }
  e.parts.push_back({str("KV cache (", generation_rows, " rows x ", positions, " positions)"),
                     kv_cache_bytes(arch, activation, generation_rows, positions)});
  // backward keeps at least every layer's input of a micro-batch, and the LM head one chunk of logits
  e.parts.push_back({str("activations (", micro_rows, " rows x ", positions, " positions)"),
                     product({arch.num_hidden_layers + 1, micro_rows, positions, arch.hidden_size, activation}) +
                         product({std::min(product({micro_rows, positions}), c.grpo.logprob_chunk_size), arch.vocab_size, 4})});
  return e;
}

MemoryEstimate generation_memory(const ModelArchConfig& arch, torch::Dtype dtype, int64_t rows, int64_t positions) {
  MemoryEstimate e;
  e.parts.push_back({"weights", product({arch.num_parameters(), element_bytes(dtype)})});
  e.parts.push_back({str("KV cache (", rows, " rows x ", positions, " positions)"),
                     kv_cache_bytes(arch, element_bytes(dtype), rows, positions)});
  e.parts.push_back({"logits", product({rows, arch.vocab_size, 4})});
  return e;
}

std::string memory_bounds(const Config& c, const ModelArchConfig& arch, int64_t world_size, MemoryUse use) {
  const int64_t element = element_bytes(torch_dtype_of(c.model.dtype));
  const int64_t activation = c.train.bf16 && element > 2 ? 2 : element;
  const int64_t positions = c.data.max_prompt_length + c.generation.max_completion_length;
  const int64_t steps = c.effective_steps_per_generation(world_size);
  const int64_t generation_rows = c.train.per_device_train_batch_size * steps;
  const std::string lengths = str("data.max_prompt_length ", c.data.max_prompt_length, " + generation.max_completion_length ",
                                  c.generation.max_completion_length);
  const std::string generation_batch = str("train.per_device_train_batch_size ", c.train.per_device_train_batch_size,
                                           " x steps_per_generation ", steps);
  const auto auto_or = [](int64_t value) { return value > 0 ? std::to_string(value) : std::string("auto"); };
  const int64_t slot_rows = rows_in_slots(c, generation_rows);
  // the passes without gradients go along the completions in pieces of grpo.logprob_sequence_chunk_size
  const int64_t sequence_chunk = c.grpo.logprob_sequence_chunk_size;
  const bool in_pieces = sequence_chunk > 0 && c.generation.max_completion_length > sequence_chunk;
  const int64_t pass_positions = in_pieces ? sequence_chunk : positions;
  switch (use) {
    case MemoryUse::Sampling:
      return str(slot_rows, " rows x ", positions, " positions, KV cache ",
                 bytes_text(static_cast<double>(kv_cache_bytes(arch, activation, slot_rows, positions))), ", logits ",
                 bytes_text(static_cast<double>(product({slot_rows, arch.vocab_size, 4}))), "; bounded by ",
                 generation_batch, ", ", lengths, ", generation.slots ", auto_or(c.generation.slots),
                 ", generation.prefill_chunk ", auto_or(c.generation.prefill_chunk));
    case MemoryUse::LogprobPass:
      return str(generation_rows, " rows x up to ", positions, " positions ",
                 in_pieces ? str("in pieces of ", sequence_chunk) : std::string("in one pass"), ", hidden states ",
                 bytes_text(static_cast<double>(product({generation_rows, pass_positions, arch.intermediate_size, activation}))),
                 " per layer", in_pieces ? str(", KV cache ", bytes_text(static_cast<double>(kv_cache_bytes(arch, activation, generation_rows, positions)))) : std::string(),
                 ", LM head ", bytes_text(static_cast<double>(product({std::min(product({generation_rows, pass_positions}),
                                                                                 c.grpo.logprob_chunk_size),
                                                                        arch.vocab_size, 4}))),
                 " per chunk; bounded by ", generation_batch, ", ", lengths, ", grpo.logprob_chunk_size ",
                 c.grpo.logprob_chunk_size, ", grpo.logprob_sequence_chunk_size ", sequence_chunk);
    case MemoryUse::TrainingStep:
      return str(c.train.per_device_train_batch_size, " rows x up to ", positions, " positions with gradients, ",
                 c.train.gradient_checkpointing ? "layer inputs " : "activations ",
                 bytes_text(static_cast<double>(product({c.train.gradient_checkpointing ? 1 : 8, arch.num_hidden_layers + 1,
                                                         c.train.per_device_train_batch_size, positions, arch.hidden_size,
                                                         activation}))),
                 "; bounded by train.per_device_train_batch_size ", c.train.per_device_train_batch_size, ", ", lengths,
                 ", train.gradient_checkpointing ", c.train.gradient_checkpointing ? "true" : "false",
                 ", grpo.logprob_chunk_size ", c.grpo.logprob_chunk_size);
  }
  return "";
}

void check_memory_fits(const MemoryEstimate& estimate, const AvailableMemory& available, const std::string& what,
                       const std::string& remedy) {
  if (available.bytes < 0 || estimate.total() <= available.bytes) return;
  throw InputError(str(what, " needs at least ", bytes_text(static_cast<double>(estimate.total())), " (",
                       estimate.describe(), ") and has ", bytes_text(static_cast<double>(available.bytes)), " (",
                       available.source, "): ", remedy));
}

}  // namespace rayless
