// The generation engine (generation_engine.h): slots, continuous batching, device-side outputs.
#include "rayless/sampler/generation_engine.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "rayless/base/error.h"
#include "rayless/base/log.h"
#include "rayless/ops/autocast_scope.h"
#include "rayless/runtime/available_memory.h"
#include "rayless/sampler/decode_graphs.h"

namespace rayless {

int64_t auto_slots(int64_t slot_bytes, int64_t available_bytes, int64_t rows) {
  rows = std::max<int64_t>(1, rows);
  if (available_bytes < 0 || slot_bytes <= 0) return rows;
  const long double fit = kSlotMemoryShare * static_cast<long double>(available_bytes) / static_cast<long double>(slot_bytes);
  return std::max<int64_t>(1, fit >= static_cast<long double>(rows) ? rows : static_cast<int64_t>(fit));
}

int64_t slot_bytes(const ModelArchConfig& arch, torch::Dtype cache_dtype, int64_t positions) {
  const long double kv = 2.0L * static_cast<long double>(arch.num_hidden_layers) * static_cast<long double>(arch.num_key_value_heads) *
                         static_cast<long double>(arch.head_dim) * static_cast<long double>(positions) *
                         static_cast<long double>(c10::elementSize(cache_dtype));
  const long double bytes = kv + 4.0L * static_cast<long double>(arch.vocab_size);
  return bytes >= static_cast<long double>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                                 : static_cast<int64_t>(bytes);
}

EngineSettings resolve_engine_settings(const SamplingParams& params, int64_t rows, const torch::Device& device,
                                       bool single_wave, const SlotMemory& memory) {
  inputCheck(params.slots >= 0, "generation.slots = ", params.slots, " is not allowed: expected 0 (auto) or more");
  inputCheck(params.prefill_chunk >= 0, "generation.prefill_chunk = ", params.prefill_chunk,
             " is not allowed: expected 0 (auto) or more");
  inputCheck(params.sync_interval >= 0, "generation.sync_interval = ", params.sync_interval,
             " is not allowed: expected 1 or more");
  EngineSettings s;
  if (params.slots > 0) {
    s.slots = std::max<int64_t>(1, std::min(params.slots, rows));
    s.slots_reason = str("generation.slots = ", params.slots);
  } else {
    s.slots = auto_slots(memory.slot_bytes, memory.available_bytes, rows);
    s.slots_reason = memory.available_bytes < 0
                         ? std::string("generation.slots auto, the memory there is not known: every row")
                         : str("generation.slots auto: ", bytes_text(static_cast<double>(memory.slot_bytes)),
                               " of KV cache and logits per slot in half of ", memory.source);
  }
  s.prefill_chunk = params.prefill_chunk;
  s.prefill_positions = params.prefill_chunk > 0 ? params.prefill_chunk : kAutoPrefillPositions;
  s.sync_interval = params.sync_interval > 0 ? params.sync_interval : (device.is_cpu() ? 1 : 8);
  inputCheck(params.lagged_look == "auto" || params.lagged_look == "on" || params.lagged_look == "off",
             "lagged_look = \"", params.lagged_look, "\" is not allowed: expected auto, on or off");
  s.lagged_look = params.lagged_look == "on" || (params.lagged_look == "auto" && device.is_cuda());
  if (single_wave) {
    s.slots = std::max<int64_t>(1, rows);
    s.prefill_chunk = 0;
    s.prefill_positions = 0;  // dynamic RoPE sizes its frequencies on the pass's furthest position
    s.slots_reason = "dynamic RoPE: every row in one wave";
    s.lagged_look = false;  // no refills to bring forward
  }
  return s;
}

namespace {

// The host's view of a slot: which row it runs, how long its prompt is, how many tokens it sampled.
// The device holds the same in positions_/steps_/rows_; the host's copy needs no synchronisation
// because every live slot advances by one token per step.
struct Slot {
  int64_t row = -1;  // -1: free
  int64_t prompt_length = 0;
  int64_t step = 0;
  int64_t position() const { return prompt_length + step; }  // of the next token fed
};

class Engine {
 public:
  Engine(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts, const SamplingParams& params,
         const SamplingStream& stream, const Tokenizer* tokenizer, KeptKV* kept)
      : model_(model), prompts_(prompts), params_(params), stream_(stream), tokenizer_(tokenizer), device_(model->device()) {
    inputCheck(!prompts.empty(), "generate: no prompts");
    inputCheck(params.num_generations >= 1, "generate: num_generations must be >= 1");
    inputCheck(params.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
    inputCheck(params.stop_strings.empty() || tokenizer, "generate: stop strings need a tokenizer");
    for (const auto& p : prompts) inputCheck(!p.empty(), "generate: empty prompt (no tokens)");
    G_ = params.num_generations;
    N_ = static_cast<int64_t>(prompts.size()) * G_;
    T_ = params.max_new_tokens;
    inputCheck(params.row_max_new_tokens.empty() || static_cast<int64_t>(params.row_max_new_tokens.size()) == N_,
               "generate: row_max_new_tokens has ", params.row_max_new_tokens.size(), " entries for ", N_, " rows");
    for (const auto& p : prompts) max_prompt_ = std::max(max_prompt_, static_cast<int64_t>(p.size()));
    greedy_ = params.greedy || params.temperature == 0.0;
    end_token_ = params.eos_ids.empty() ? params.pad_id : params.eos_ids.front();
    penalty_ = params.repetition_penalty != 1.0;
    const bool single_wave = model->config().rope.type == RopeType::Dynamic;
    settings_ = resolve_engine_settings(params, N_, device_, single_wave, slot_memory());
    // kept keys and values: not under dynamic RoPE, whose one wave shares the rotary state
    if (!single_wave) kept_ = kept;
    if (kept_) {  // rows not continued now have left the tool loop: their keys and values go
      std::vector<int64_t> rows(static_cast<size_t>(N_));
      for (int64_t r = 0; r < N_; ++r) rows[static_cast<size_t>(r)] = stream_.global_row(r);
      kept_->keep_only(rows);
    }
    stats_.slots = settings_.slots;
    // the slot count when it changes (a single row, `rayless generate`'s, needs no line)
    static int64_t said_slots = -1, said_rows = -1;
    if (N_ > 1 && (settings_.slots != said_slots || N_ != said_rows))
      log_info(str("generation: ", settings_.slots, " decode slot(s) for ", N_, " rows (", settings_.slots_reason, ")"));
    if (N_ > 1) said_slots = settings_.slots, said_rows = N_;
    // CUDA graphs: on a CUDA device when this build has them (dynamic RoPE reads its length on the host)
    inputCheck(params.cuda_graphs == "auto" || params.cuda_graphs == "on" || params.cuda_graphs == "off",
               "generation.cuda_graphs = \"", params.cuda_graphs, "\" is not allowed: expected auto, on or off");
    inputCheck(!(params.cuda_graphs == "on" && device_.is_cuda() && !DecodeGraphs::available()),
               "generation.cuda_graphs = \"on\" but this build of rayless has no CUDA graphs (built without CUDA)");
    if (device_.is_cuda() && params.cuda_graphs != "off" && DecodeGraphs::available() && !single_wave)
      graphs_.emplace(device_);
    if (device_.is_cuda()) {
      static bool said = false;  // once per process
      if (!said)
        log_info(graphs_ ? "generation: decode steps replayed as CUDA graphs, one per slot bucket (generation.cuda_graphs)"
                         : "generation: decode steps run eagerly (generation.cuda_graphs)");
      said = true;
    }
    row_end_.assign(static_cast<size_t>(N_), 0);
    ended_.assign(static_cast<size_t>(N_), false);
    if (!params.stop_strings.empty()) {
      so_far_.resize(static_cast<size_t>(N_));
      checked_.assign(static_cast<size_t>(N_), 0);
    }
  }

  GenerationOutput run() {
    if (T_ > 0) {
      allocate_state();
      std::optional<FusedGenerationWeights> fused;
      if (params_.fused_weights) fused.emplace(model_);
      std::optional<Look> pending;  // lagged looks: the look started after the last steps, read after the next
      while (true) {
        admit();
        pack();
        if (live_ == 0) break;
        // the steps until the host looks again: the interval, and no slot past its last token
        int64_t count = settings_.sync_interval;
        for (int64_t i = 0; i < live_; ++i) {
          const Slot& slot = slots_[static_cast<size_t>(i)];
          count = std::min(count, limit(slot.row) - slot.step);
        }
        if (count == 0) {  // a row at its token limit: its look is read before anything runs
          Look now = pending ? std::move(*pending) : start_look();
          pending.reset();
          read_look(now);
          continue;
        }
        for (int64_t k = 0; k < count; ++k) decode_step();
        Look next = start_look();
        if (settings_.lagged_look) {
          if (pending) read_look(*pending);
          pending = std::move(next);
        } else {
          read_look(next);
        }
      }
    }
    return assemble();
  }

 private:
  // generation.slots = "auto": a slot's bytes at this generation's lengths, against the memory there
  // is (on the CPU shared by the ranks of the node), measured once per process: later generations
  // find the earlier ones' memory held by the caching allocator and would count it as taken.
  SlotMemory slot_memory() const {
    if (params_.slots > 0) return {};
    const auto cache_dtype = ops::autocast_compute_dtype(device_.type(), model_->dtype());
    static std::optional<AvailableMemory> measured;
    if (!measured) measured = available_memory(device_, std::max(1, params_.ranks_on_node));
    return {slot_bytes(model_->config(), cache_dtype, max_prompt_ + T_), measured->bytes, measured->source};
  }

  // the most tokens row `row` may have
  int64_t limit(int64_t row) const {
    return params_.row_max_new_tokens.empty() ? T_
                                              : std::min(T_, std::max<int64_t>(0, params_.row_max_new_tokens[static_cast<size_t>(row)]));
  }

  torch::TensorOptions on_device(torch::Dtype dtype) const { return torch::TensorOptions().dtype(dtype).device(device_); }

  // A host tensor on the generation's device. On a GPU through pinned memory, asynchronously: a copy
  // from pageable memory waits until the device has run everything queued before it, which would
  // undo the lagged look (the caching host allocator keeps the pinned block until the copy is done).
  torch::Tensor to_device(const torch::Tensor& host) const {
    if (!device_.is_cuda()) return host.to(device_);
    return host.pin_memory().to(device_, /*non_blocking=*/true);
  }
  torch::Tensor to_device(const std::vector<int64_t>& values) const { return to_device(torch::tensor(values, torch::kLong)); }

  void allocate_state() {
    const int64_t S = settings_.slots;
    slots_.assign(static_cast<size_t>(S), Slot{});
    positions_ = torch::zeros({S}, on_device(torch::kLong));
    steps_ = torch::zeros({S}, on_device(torch::kLong));
    rows_ = torch::full({S}, N_, on_device(torch::kLong));
    done_ = torch::zeros({S}, on_device(torch::kBool));
    logits_ = torch::zeros({S, model_->config().vocab_size}, on_device(torch::kFloat32));
    if (penalty_) penalty_ids_ = torch::full({S, max_prompt_ + T_}, params_.pad_id, on_device(torch::kLong));
    // outputs: a dummy row N and a dummy column T take the writes of finished slots
    out_ids_ = torch::full({N_ + 1, T_ + 1}, params_.pad_id, on_device(torch::kLong));
    if (params_.return_logprobs) {
      out_logprobs_ = torch::zeros({N_ + 1, T_ + 1}, on_device(torch::kFloat32));
      out_entropies_ = torch::zeros({N_ + 1, T_ + 1}, on_device(torch::kFloat32));
    }
    eos_end_ = torch::zeros({N_ + 1}, on_device(torch::kLong));
    out_nonfinite_ = torch::zeros({N_ + 1}, on_device(torch::kBool));
    eos_ = to_device(torch::tensor(params_.eos_ids.empty() ? std::vector<int64_t>{-1} : params_.eos_ids, torch::kLong));
    if (!greedy_) {
      uniforms_ = torch::zeros({N_ + 1, T_ + 1}, torch::kFloat32);
      uniforms_.narrow(0, 0, N_).narrow(1, 0, T_).copy_(sampling_uniforms(stream_, N_, T_));
      uniforms_ = to_device(uniforms_);
    }
  }

  // Pending rows into free slots: the distinct prompts among them prefilled in chunks, each prompt's
  // keys and values copied into the slots of its rows.
  void admit() {
    std::vector<int64_t> free_slots;
    for (int64_t i = 0; i < settings_.slots; ++i)
      if (slots_[static_cast<size_t>(i)].row < 0) free_slots.push_back(i);
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(free_slots.size()), N_ - next_row_);
    if (count <= 0) return;
    size_t used = 0;
    // in row order: runs of rows that resume kept keys and values, and runs that prefill
    while (static_cast<int64_t>(used) < count) {
      const auto resumes = [&](int64_t row) { return kept_ && G_ == 1 && kept_->contains(stream_.global_row(row)); };
      const bool kept_run = resumes(next_row_);
      int64_t run = 1;
      while (static_cast<int64_t>(used) + run < count && resumes(next_row_ + run) == kept_run) ++run;
      const size_t placed = kept_run ? resume_kept(run, free_slots, used) : prefill_rows(run, free_slots, used);
      runtimeCheck(placed == static_cast<size_t>(run), "generation: placed ", placed, " of ", run, " rows");
      used += placed;
    }
  }

  // The next `run` pending rows, prefilled: the distinct prompts among them in chunks.
  size_t prefill_rows(int64_t run, const std::vector<int64_t>& free_slots, size_t used) {
    const int64_t admitted = static_cast<int64_t>(used) + run;
    // the admitted rows' prompts, in order, each once
    std::vector<int64_t> prompt_of_chunk;
    for (int64_t r = next_row_; r < next_row_ + run; ++r)
      if (prompt_of_chunk.empty() || prompt_of_chunk.back() != r / G_) prompt_of_chunk.push_back(r / G_);
    const size_t before = used;
    size_t first = 0;
    while (first < prompt_of_chunk.size()) {
      // a chunk: as many prompts as fit prefill_chunk tokens (rows x longest), at least one
      size_t last = first + 1;
      int64_t width = static_cast<int64_t>(prompts_[static_cast<size_t>(prompt_of_chunk[first])].size());
      while (last < prompt_of_chunk.size() && settings_.prefill_chunk != 0) {
        const int64_t w = std::max(width, static_cast<int64_t>(prompts_[static_cast<size_t>(prompt_of_chunk[last])].size()));
        if (w * static_cast<int64_t>(last - first + 1) > settings_.prefill_chunk) break;
        width = w;
        ++last;
      }
      if (settings_.prefill_chunk == 0) last = prompt_of_chunk.size();
      used += prefill(std::vector<int64_t>(prompt_of_chunk.begin() + static_cast<std::ptrdiff_t>(first),
                                           prompt_of_chunk.begin() + static_cast<std::ptrdiff_t>(last)),
                      free_slots, used, admitted);
      first = last;
    }
    return used - before;
  }

  // The next `run` pending rows (one generation each), from the keys and values kept for them: the
  // prefix their prompt shares with what the row held goes back into a slot, and only the rest runs
  // through the model (forward_slots on a cache of these rows, in pieces of prefill_positions), which
  // also gives each row's logits for its first token.
  size_t resume_kept(int64_t run, const std::vector<int64_t>& free_slots, size_t used) {
    const int64_t n = run;
    std::vector<KeptKV::Row> held;
    std::vector<int64_t> from(static_cast<size_t>(n)), lengths(static_cast<size_t>(n));
    int64_t width = 0, longest_new = 0;
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<int64_t>& prompt = prompts_[static_cast<size_t>(next_row_ + i)];
      held.push_back(*kept_->take(stream_.global_row(next_row_ + i)));
      const KeptKV::Row& row = held.back();
      int64_t shared = 0;
      while (shared < static_cast<int64_t>(std::min(prompt.size(), row.tokens.size())) &&
             prompt[static_cast<size_t>(shared)] == row.tokens[static_cast<size_t>(shared)])
        ++shared;
      // at least the prompt's last token runs again: its logits pick the first token
      from[static_cast<size_t>(i)] = std::min({shared, row.valid, static_cast<int64_t>(prompt.size()) - 1});
      lengths[static_cast<size_t>(i)] = static_cast<int64_t>(prompt.size());
      width = std::max(width, lengths[static_cast<size_t>(i)]);
      longest_new = std::max(longest_new, lengths[static_cast<size_t>(i)] - from[static_cast<size_t>(i)]);
      kept_->reused_tokens += from[static_cast<size_t>(i)];
    }
    kept_->resumed_rows += n;
    const size_t layers = held.front().keys.size();
    // these rows' own cache: the kept prefixes, then the new tokens; one position past the longest row
    // takes the padding's writes, which no real token attends
    KVCache rows_cache;
    for (size_t l = 0; l < layers; ++l) {
      for (auto [from_tensors, to] : {std::pair{&KeptKV::Row::keys, &rows_cache.keys}, std::pair{&KeptKV::Row::values, &rows_cache.values}}) {
        const torch::Tensor& like = (held.front().*from_tensors)[l];
        auto cache = torch::zeros({n, like.size(0), width + 1, like.size(2)}, like.options());
        for (int64_t i = 0; i < n; ++i)
          cache[i].narrow(1, 0, from[static_cast<size_t>(i)]).copy_((held[static_cast<size_t>(i)].*from_tensors)[l].narrow(1, 0, from[static_cast<size_t>(i)]));
        to->push_back(cache);
      }
    }
    held.clear();  // the kept tensors are in rows_cache now
    rows_cache.attend_length = width + 1;
    const int64_t piece = settings_.prefill_positions > 0 ? settings_.prefill_positions : longest_new;
    auto last_hidden = torch::Tensor();
    for (int64_t start = 0; start < longest_new; start += piece) {
      const int64_t count = std::min(piece, longest_new - start);
      // padding: the pad token at the spare position
      std::vector<int64_t> ids(static_cast<size_t>(n * count), params_.pad_id), positions(ids.size(), width);
      std::vector<int64_t> last_at(static_cast<size_t>(n), -1);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<int64_t>& prompt = prompts_[static_cast<size_t>(next_row_ + i)];
        const int64_t first = from[static_cast<size_t>(i)] + start, end = std::min(first + count, lengths[static_cast<size_t>(i)]);
        for (int64_t p = first; p < end; ++p) {
          ids[static_cast<size_t>(i * count + p - first)] = prompt[static_cast<size_t>(p)];
          positions[static_cast<size_t>(i * count + p - first)] = p;
        }
        if (first < end && end == lengths[static_cast<size_t>(i)]) last_at[static_cast<size_t>(i)] = end - 1 - first;
      }
      const auto hidden = model_->forward_slots(to_device(torch::tensor(ids, torch::kLong).view({n, count})),
                                                to_device(torch::tensor(positions, torch::kLong).view({n, count})), rows_cache);
      if (!last_hidden.defined()) last_hidden = torch::zeros({n, hidden.size(2)}, hidden.options());
      for (int64_t i = 0; i < n; ++i)
        if (last_at[static_cast<size_t>(i)] >= 0) last_hidden[i].copy_(hidden[i][last_at[static_cast<size_t>(i)]]);
    }
    for (int64_t i = 0; i < n; ++i) stats_.prefill_tokens += lengths[static_cast<size_t>(i)] - from[static_cast<size_t>(i)];
    const auto last_logits = model_->logits(last_hidden).to(torch::kFloat32);
    ensure_slot_cache(rows_cache.keys, rows_cache.values);
    std::vector<int64_t> sources(static_cast<size_t>(n));
    std::iota(sources.begin(), sources.end(), 0);
    return place(free_slots, used, lengths, sources, rows_cache.keys, rows_cache.values, /*width=*/-1, last_logits);
  }

  // Prefills `prompts` (distinct, in row order) and puts their pending rows (at most `admitted - used`
  // more) into free_slots[used...]. Returns the number of rows placed.
  size_t prefill(const std::vector<int64_t>& prompts, const std::vector<int64_t>& free_slots, size_t used,
                 int64_t admitted) {
    std::vector<std::vector<int64_t>> chunk;
    for (int64_t p : prompts) chunk.push_back(prompts_[static_cast<size_t>(p)]);
    auto [ids, mask] = left_pad(chunk, params_.pad_id);
    const int64_t width = ids.size(1);
    KVCache prefilled;
    prefilled.rope_state = cache_.rope_state;  // dynamic RoPE: one state through the generation
    prefilled.capacity_hint = width;
    // in pieces along the sequence where the prompts are wider than prefill_positions, the cache of
    // the pieces before holding their keys and values
    const int64_t piece = settings_.prefill_positions > 0 ? settings_.prefill_positions : width;
    const auto ids_here = to_device(ids), mask_here = to_device(mask);
    torch::Tensor hidden;
    for (int64_t start = 0; start < width; start += piece) {
      const int64_t end = std::min(start + piece, width);
      hidden = model_->forward_hidden(ids_here.slice(1, start, end), mask_here.slice(1, 0, end), {}, &prefilled);
    }
    cache_.rope_state = prefilled.rope_state;
    const auto last_logits = model_->logits(hidden.select(1, hidden.size(1) - 1)).to(torch::kFloat32);
    ++stats_.prefills;
    for (const auto& prompt : chunk) stats_.prefill_tokens += static_cast<int64_t>(prompt.size());
    ensure_slot_cache(prefilled.keys, prefilled.values);
    std::vector<int64_t> lengths, sources;
    for (size_t j = 0; j < prompts.size(); ++j)
      for (int64_t r = next_row_ + static_cast<int64_t>(lengths.size());
           r < N_ && r / G_ == prompts[j] && static_cast<int64_t>(used + lengths.size()) < admitted; ++r) {
        lengths.push_back(static_cast<int64_t>(chunk[j].size()));
        sources.push_back(static_cast<int64_t>(j));
      }
    return place(free_slots, used, lengths, sources, prefilled.keys, prefilled.values, width, last_logits);
  }

  // The slots' cache, in the dtype the cache stores (autocast's), shaped after the first keys and
  // values a prefill or a resume holds ([rows, H_kv, positions, D] per layer).
  void ensure_slot_cache(const std::vector<torch::Tensor>& keys, const std::vector<torch::Tensor>& values) {
    if (!keys_.empty()) return;
    const int64_t max_len = max_prompt_ + T_;
    for (size_t l = 0; l < keys.size(); ++l) {
      const auto& k = keys[l];
      keys_.push_back(torch::zeros({settings_.slots, k.size(1), max_len, k.size(3)}, k.options()));
      values_.push_back(torch::zeros({settings_.slots, k.size(1), max_len, k.size(3)}, values[l].options()));
    }
    cache_.keys = keys_;  // the same tensors: moves and writes are in place
    cache_.values = values_;
    if (kept_ && kept_->budget_bytes < 0) {
      int64_t bytes = 0;
      for (size_t l = 0; l < keys_.size(); ++l) bytes += static_cast<int64_t>(keys_[l].nbytes() + values_[l].nbytes());
      kept_->budget_bytes = bytes;
    }
  }

  // The next lengths.size() pending rows into free_slots[used...]: row k's `lengths[k]` prompt
  // positions from row sources[k] of `keys`/`values` ([rows, H_kv, positions, D] per layer; its prompt
  // right-aligned at `width` when width >= 0, from position 0 when width < 0), its first token's logits
  // last_logits[sources[k]]. Returns the number of rows placed.
  size_t place(const std::vector<int64_t>& free_slots, size_t used, const std::vector<int64_t>& lengths,
               const std::vector<int64_t>& sources, const std::vector<torch::Tensor>& keys,
               const std::vector<torch::Tensor>& values, int64_t width, const torch::Tensor& last_logits) {
    if (lengths.empty()) return 0;
    std::vector<int64_t> placed_slots, placed_rows;
    std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>> by_length;  // length -> slots, sources
    for (size_t k = 0; k < lengths.size(); ++k, ++next_row_) {
      const int64_t slot = free_slots[used + k];
      by_length[lengths[k]].first.push_back(slot);
      by_length[lengths[k]].second.push_back(sources[k]);
      slots_[static_cast<size_t>(slot)] = Slot{next_row_, lengths[k], 0};
      placed_slots.push_back(slot);
      placed_rows.push_back(next_row_);
    }
    // the prompts' keys and values from position 0 in their slots: one copy per layer for all the rows
    // of a prompt length (the G rows of a prompt share its prefill)
    for (const auto& [length, slots_and_sources] : by_length) {
      const auto slot_index = to_device(slots_and_sources.first);
      const auto source_index = to_device(slots_and_sources.second);
      const int64_t first = width >= 0 ? width - length : 0;
      for (size_t l = 0; l < keys_.size(); ++l) {
        keys_[l].narrow(2, 0, length).index_copy_(0, slot_index, keys[l].narrow(2, first, length).index_select(0, source_index));
        values_[l].narrow(2, 0, length).index_copy_(0, slot_index, values[l].narrow(2, first, length).index_select(0, source_index));
      }
    }
    const auto slot_index = to_device(placed_slots);
    const auto source_index = to_device(sources);
    const int64_t n = slot_index.size(0);
    positions_.index_copy_(0, slot_index, to_device(lengths));
    steps_.index_copy_(0, slot_index, torch::zeros({n}, on_device(torch::kLong)));
    rows_.index_copy_(0, slot_index, to_device(placed_rows));
    done_.index_copy_(0, slot_index, torch::zeros({n}, on_device(torch::kBool)));
    logits_.index_copy_(0, slot_index, last_logits.index_select(0, source_index));
    if (penalty_) {  // the prompt left-padded to the longest of the generation, as one batch would hold it
      auto padded = torch::full({n, max_prompt_ + T_}, params_.pad_id, torch::kLong);
      for (int64_t k = 0; k < n; ++k) {
        const auto& prompt = prompts_[static_cast<size_t>(placed_rows[static_cast<size_t>(k)] / G_)];
        const int64_t length = static_cast<int64_t>(prompt.size());
        padded[k].narrow(0, max_prompt_ - length, length).copy_(torch::tensor(prompt, torch::kLong));
      }
      penalty_ids_.index_copy_(0, slot_index, to_device(padded));
    }
    return placed_slots.size();
  }

  // With no row left to take them, free slots below live ones take those rows (their state and keys
  // and values), so that the live slots are [0, live) and a step computes them alone.
  void pack() {
    std::vector<int64_t> from, to;
    int64_t top = settings_.slots - 1;
    for (int64_t hole = 0; hole < settings_.slots; ++hole) {
      if (slots_[static_cast<size_t>(hole)].row >= 0) continue;
      while (top > hole && slots_[static_cast<size_t>(top)].row < 0) --top;
      if (top <= hole) break;
      from.push_back(top);
      to.push_back(hole);
      slots_[static_cast<size_t>(hole)] = slots_[static_cast<size_t>(top)];
      slots_[static_cast<size_t>(top)] = Slot{};
      --top;
    }
    live_ = 0;
    while (live_ < settings_.slots && slots_[static_cast<size_t>(live_)].row >= 0) ++live_;
    if (from.empty()) return;
    const auto from_index = to_device(from), to_index = to_device(to);
    const auto move = [&](torch::Tensor& t) { t.index_copy_(0, to_index, t.index_select(0, from_index)); };
    for (auto* t : {&positions_, &steps_, &rows_, &done_, &logits_}) move(*t);
    if (penalty_) move(penalty_ids_);
    for (auto& k : keys_) move(k);
    for (auto& v : values_) move(v);
    // the slots moved from are idle: their writes go to the dummy row
    rows_.index_fill_(0, from_index, N_);
    done_.index_fill_(0, from_index, true);
  }

  // One token for every live slot: the host's bookkeeping, then the device's work.
  void decode_step() {
    const int64_t live = live_;
    // the attended length: the longest live sequence once this token is in; no forward when no slot
    // samples again
    int64_t attend = 0;
    bool again = false;
    for (int64_t i = 0; i < live; ++i) {
      Slot& slot = slots_[static_cast<size_t>(i)];
      attend = std::max(attend, slot.position() + 1);
      ++slot.step;
      again = again || slot.step < limit(slot.row);
    }
    int64_t rows = live;
    if (params_.fixed_shapes || graphs_) {  // as a graph of this slot bucket replays it
      rows = 1;
      while (rows < live) rows *= 2;
      rows = std::min(rows, settings_.slots);
      attend = max_prompt_ + T_;
      again = true;
    }
    if (graphs_)
      graphs_->run(rows, [&] { step_on_device(rows, attend); });
    else
      step_on_device(rows, again ? attend : 0);
    ++stats_.decode_steps;
    stats_.slot_steps += rows;
  }

  // Slots [0, rows): sample from their logits, write the outputs into the row buffers, and (when
  // attend_length > 0) feed the tokens through the model, attending to that many positions. Device work
  // only, with no host synchronisation: the same operations every step for the same rows and length.
  void step_on_device(int64_t rows_count, int64_t attend_length) {
    const auto rows = rows_.narrow(0, 0, rows_count), steps = steps_.narrow(0, 0, rows_count);
    const auto positions = positions_.narrow(0, 0, rows_count), done = done_.narrow(0, 0, rows_count);
    const auto scores = logits_.narrow(0, 0, rows_count);
    torch::Tensor ids_so_far;
    if (penalty_) {
      // the row's prompt (left-padded) and its tokens so far; later columns repeat the last prompt
      // token, which is already in the set
      const auto ids = penalty_ids_.narrow(0, 0, rows_count);
      const auto columns = torch::arange(max_prompt_ + T_, on_device(torch::kLong)).view({1, -1});
      ids_so_far = torch::where(columns < (steps + max_prompt_).view({-1, 1}), ids, ids.narrow(1, max_prompt_ - 1, 1));
    }
    // A row whose logits are not all finite (a policy that diverged) cannot be sampled: it ends at this
    // step with the end token and is marked in nonfinite (the trainer's guard then leaves the step out,
    // nonfinite_guard.h); its logits are zeroed first so that the others sample on.
    const auto bad = torch::isfinite(scores).all(-1).logical_not();
    const auto processed = process_logits(scores.masked_fill(bad.unsqueeze(1), 0.0), ids_so_far, params_);
    const auto column = steps.clamp_max(T_);
    const auto sampled = greedy_ ? processed.argmax(-1)
                                 : sample_inverse_cdf(processed.softmax(-1), uniforms_.index({rows, column}));
    const auto token = torch::where(bad, torch::full_like(sampled, end_token_), sampled);
    // finished slots write to the dummy row
    const auto active = done.logical_not();
    const auto target = torch::where(active, rows, torch::full_like(rows, N_));
    out_ids_.index_put_({target, column}, token);
    if (params_.return_logprobs) {
      const auto base = greedy_ ? scores : scores / params_.temperature;
      const auto log_probs = base.log_softmax(-1);
      out_logprobs_.index_put_({target, column}, log_probs.gather(1, token.unsqueeze(1)).squeeze(1));
      // 0 * -inf counts 0
      out_entropies_.index_put_({target, column}, -(log_probs.exp() * log_probs).nan_to_num(0.0).sum(-1));
    }
    const auto hit = (torch::isin(token, eos_) | bad) & active;
    out_nonfinite_.index_put_({torch::where(bad & active, rows, torch::full_like(rows, N_))}, torch::ones_like(bad));
    eos_end_.index_put_({torch::where(hit, rows, torch::full_like(rows, N_))}, column + 1);
    done.logical_or_(hit);
    if (penalty_)
      penalty_ids_.narrow(0, 0, rows_count)
          .scatter_(1, (steps + max_prompt_).clamp_max(max_prompt_ + T_ - 1).unsqueeze(1), token.unsqueeze(1));
    if (attend_length > 0) {
      cache_.attend_length = attend_length;
      const auto hidden = model_->forward_slots(token, positions, cache_);
      scores.copy_(model_->logits(hidden));
    }
    // an idle slot (fixed shapes) keeps its writes inside its own cache row
    positions.add_(1).clamp_max_(max_prompt_ + T_ - 1);
    steps.add_(1);
  }

  // A look: what the host reads to learn which rows ended (EOS on the device, a stop string, or
  // max_new_tokens), taken from the live slots after a run of steps. Rows, not slots, identify it: the
  // slots may be packed before a lagged look is read.
  struct Look {
    std::vector<int64_t> rows, steps;  // per live slot then: its row, the tokens it had sampled
    torch::Tensor host;                // done flags, where EOS ended each row, the rows' tokens (when read)
    bool has_ids = false;
    std::optional<c10::Event> copied;  // on a GPU: the asynchronous copy into `host` is done
  };

  // One copy to the host per look (on a GPU one wait, or none when lagged): the done flags, where EOS
  // ended each row and, for stop strings and kept keys and values, the rows' tokens.
  Look start_look() {
    ++stats_.host_syncs;
    Look look;
    const int64_t live = live_;
    for (int64_t i = 0; i < live; ++i) {
      look.rows.push_back(slots_[static_cast<size_t>(i)].row);
      look.steps.push_back(slots_[static_cast<size_t>(i)].step);
    }
    const auto rows = rows_.narrow(0, 0, live);
    std::vector<torch::Tensor> parts{done_.narrow(0, 0, live).to(torch::kLong), eos_end_.index_select(0, rows)};
    look.has_ids = !so_far_.empty() || kept_;
    if (look.has_ids) parts.push_back(out_ids_.index_select(0, rows).reshape({-1}));
    const auto packed = torch::cat(parts);
    if (device_.is_cuda()) {
      // pinned, so that the copy runs on the device's stream without the host waiting for it
      look.host = torch::empty(packed.sizes(), packed.options().device(torch::kCPU).pinned_memory(true));
      look.host.copy_(packed, /*non_blocking=*/true);
      const c10::impl::VirtualGuardImpl guard(device_.type());
      look.copied.emplace(device_.type());
      look.copied->record(guard.getStream(device_));
    } else {
      look.host = packed.to(torch::kCPU);
    }
    return look;
  }

  // Reads a look: the rows that ended by then give up their slots.
  void read_look(Look& look) {
    if (look.copied) look.copied->synchronize();
    const int64_t live = static_cast<int64_t>(look.rows.size());
    const auto done = look.host.narrow(0, 0, live).to(torch::kBool);
    const auto eos_end = look.host.narrow(0, live, live);
    torch::Tensor ids;
    if (look.has_ids) ids = look.host.narrow(0, 2 * live, live * out_ids_.size(1)).view({live, out_ids_.size(1)});
    const auto done_a = done.accessor<bool, 1>();
    const auto eos_a = eos_end.accessor<int64_t, 1>();
    // where each look's row is now (a row that ended at an earlier look is in no slot)
    std::map<int64_t, int64_t> slot_of_row;
    for (int64_t i = 0; i < settings_.slots; ++i)
      if (slots_[static_cast<size_t>(i)].row >= 0) slot_of_row[slots_[static_cast<size_t>(i)].row] = i;
    std::vector<int64_t> freed;
    for (int64_t k = 0; k < live; ++k) {
      const auto found = slot_of_row.find(look.rows[static_cast<size_t>(k)]);
      if (found == slot_of_row.end()) continue;
      const int64_t i = found->second;
      Slot& slot = slots_[static_cast<size_t>(i)];
      const size_t row = static_cast<size_t>(slot.row);
      const int64_t step = look.steps[static_cast<size_t>(k)];
      const bool eos = done_a[k];
      const int64_t sampled = eos ? eos_a[k] : step;  // tokens of the row that count
      int64_t end = eos ? sampled : (step >= limit(slot.row) ? limit(slot.row) : -1);
      bool ended = eos;
      if (!so_far_.empty()) {
        const auto ids_a = ids.accessor<int64_t, 2>();
        for (int64_t t = checked_[row]; t < sampled; ++t) {
          so_far_[row].push_back(ids_a[k][t]);
          if (stop_string_in(tokenizer_->decode(so_far_[row], false))) {
            end = t + 1;
            ended = true;
            break;
          }
        }
        checked_[row] = sampled;
      }
      if (end < 0) continue;
      row_end_[row] = end;
      ended_[row] = ended;
      if (kept_) keep(i, slot, end, ids.accessor<int64_t, 2>()[k]);
      slot = Slot{};
      freed.push_back(i);
    }
    // freed slots write to the dummy row until they are refilled or packed away
    if (!freed.empty()) {
      const auto index = to_device(freed);
      rows_.index_fill_(0, index, N_);
      done_.index_fill_(0, index, true);
    }
  }

  // A row that ended in slot i after `end` tokens: its sequence and the keys and values of all of it
  // but the last token (sampled, never fed), into the store for its next turn.
  void keep(int64_t i, const Slot& slot, int64_t end, const at::TensorAccessor<int64_t, 1>& ids) {
    KeptKV::Row kept;
    kept.tokens = prompts_[static_cast<size_t>(slot.row / G_)];
    for (int64_t t = 0; t < end; ++t) kept.tokens.push_back(ids[t]);
    kept.valid = slot.prompt_length + std::max<int64_t>(end - 1, 0);
    for (size_t l = 0; l < keys_.size(); ++l) {
      kept.keys.push_back(keys_[l][i].narrow(1, 0, kept.valid).clone());
      kept.values.push_back(values_[l][i].narrow(1, 0, kept.valid).clone());
    }
    kept_->keep(stream_.global_row(slot.row), std::move(kept));
  }

  bool stop_string_in(const std::string& text) const {
    for (const auto& stop : params_.stop_strings)
      if (!stop.empty() && text.find(stop) != std::string::npos) return true;
    return false;
  }

  GenerationOutput assemble() {
    GenerationOutput out;
    auto [prompt_ids, prompt_mask] = left_pad(prompts_, params_.pad_id);
    const auto repeat = torch::arange(static_cast<int64_t>(prompts_.size()), torch::kLong).repeat_interleave(G_);
    out.prompt_ids = prompt_ids.index_select(0, repeat);
    out.prompt_mask = prompt_mask.index_select(0, repeat);
    const auto lengths = torch::tensor(row_end_, torch::kLong);
    const int64_t width = N_ > 0 && T_ > 0 ? lengths.max().item<int64_t>() : 0;
    out.truncated = torch::tensor(std::vector<int64_t>(ended_.begin(), ended_.end()), torch::kLong).logical_not();
    stats_.tokens = lengths.sum().item<int64_t>();
    const auto mask = torch::arange(width, torch::kLong).view({1, -1}) < lengths.view({-1, 1});
    out.completion_mask = mask.to(torch::kLong);
    if (width == 0) {
      out.completion_ids = torch::zeros({N_, 0}, torch::kLong);
      if (params_.return_logprobs) out.logprobs = out.entropies = torch::zeros({N_, 0}, torch::kFloat32);
    } else {
      const auto written = [&](const torch::Tensor& t) { return t.narrow(0, 0, N_).narrow(1, 0, width).to(torch::kCPU); };
      out.completion_ids = torch::where(mask, written(out_ids_), torch::full({N_, width}, params_.pad_id, torch::kLong));
      if (params_.return_logprobs) {
        out.logprobs = torch::where(mask, written(out_logprobs_), torch::zeros({N_, width}, torch::kFloat32));
        out.entropies = torch::where(mask, written(out_entropies_), torch::zeros({N_, width}, torch::kFloat32));
      }
    }
    out.nonfinite = out_nonfinite_.defined() ? out_nonfinite_.narrow(0, 0, N_).to(torch::kCPU)
                                             : torch::zeros({N_}, torch::kBool);
    out.stats = stats_;
    return out;
  }

  CausalLM model_;
  const std::vector<std::vector<int64_t>>& prompts_;
  const SamplingParams& params_;
  const SamplingStream& stream_;
  const Tokenizer* tokenizer_;
  KeptKV* kept_ = nullptr;  // where ended rows leave their keys and values, and resumed rows find them
  torch::Device device_;
  EngineSettings settings_;
  int64_t G_ = 1, N_ = 0, T_ = 0, max_prompt_ = 0;
  bool greedy_ = false, penalty_ = false;

  // slots: the host's view, and the device's state (per slot)
  std::vector<Slot> slots_;
  int64_t live_ = 0;      // slots [0, live) run (packed)
  int64_t next_row_ = 0;  // the next pending row
  torch::Tensor positions_, steps_, rows_, done_, logits_, penalty_ids_;
  std::vector<torch::Tensor> keys_, values_;  // per layer [S, H_kv, max_len, D]
  KVCache cache_;                             // slot mode over keys_ / values_; dynamic RoPE's state
  std::optional<DecodeGraphs> graphs_;        // CUDA only

  // outputs on the device, [N + 1, T + 1] (a dummy row and column)
  torch::Tensor out_ids_, out_logprobs_, out_entropies_, eos_end_, eos_, uniforms_, out_nonfinite_;
  int64_t end_token_ = 0;  // what a row whose logits are not finite ends with: the first EOS id, else pad

  // the host's record of each row
  std::vector<int64_t> row_end_;  // tokens kept
  std::vector<bool> ended_;       // by EOS or a stop string (else truncated)
  std::vector<std::vector<int64_t>> so_far_;  // stop strings: the row's tokens checked so far
  std::vector<int64_t> checked_;
  EngineStats stats_;
};

}  // namespace

GenerationOutput run_generation_engine(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                       const SamplingParams& params, const SamplingStream& stream,
                                       const Tokenizer* tokenizer, KeptKV* kept) {
  const bool was_training = model->is_training();
  model->eval();
  Engine engine(model, prompts, params, stream, tokenizer, kept);
  GenerationOutput out = engine.run();
  if (was_training) model->train();
  return out;
}

}  // namespace rayless
