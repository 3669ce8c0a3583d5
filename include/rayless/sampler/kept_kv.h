// KeptKV: the keys and values of rows that ended a turn, kept for the same rows' next turn. A row
// that stops for a tool call leaves its slot to other rows; when its conversation comes back with the
// tool's results appended, the engine puts the kept keys and values of the prefix the conversation
// shares with what the row held back into a slot and runs only the new tokens through the model, where
// a fresh generation would prefill the whole conversation again (issue 50, docs/tools.md).
//
// Rows are keyed by their global row index (SamplingStream::global_row), which every turn of a
// conversation keeps. The store holds tensors on the generation's device, in the cache's dtype.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace rayless {

class KeptKV {
 public:
  struct Row {
    std::vector<int64_t> tokens;      // the row's sequence: prompt or conversation, then its sampled tokens
    int64_t valid = 0;                // leading tokens whose keys and values are held (the last sampled one was never fed)
    std::vector<torch::Tensor> keys;  // per layer [H_kv, valid, D]
    std::vector<torch::Tensor> values;
  };

  // Keeps a row unless that would take the store past budget_bytes (the row's next turn then prefills
  // again). Returns whether it was kept.
  bool keep(int64_t global_row, Row row) {
    take(global_row);
    const int64_t bytes = bytes_of(row);
    if (budget_bytes >= 0 && bytes_ + bytes > budget_bytes) {
      ++dropped_rows;
      return false;
    }
    bytes_ += bytes;
    rows_[global_row] = std::move(row);
    return true;
  }
  // The row's kept state, removed from the store (a resumed row's keys and values move into a slot).
  std::optional<Row> take(int64_t global_row) {
    const auto it = rows_.find(global_row);
    if (it == rows_.end()) return std::nullopt;
    Row row = std::move(it->second);
    rows_.erase(it);
    bytes_ -= bytes_of(row);
    return row;
  }
  // Drops every row but these: a conversation that left the tool loop never comes back.
  void keep_only(const std::vector<int64_t>& global_rows) {
    std::unordered_map<int64_t, Row> staying;
    for (const int64_t r : global_rows)
      if (auto row = take(r)) staying.emplace(r, std::move(*row));
    rows_.swap(staying);
    bytes_ = 0;
    for (const auto& [r, row] : rows_) bytes_ += bytes_of(row);
  }
  bool contains(int64_t global_row) const { return rows_.count(global_row) > 0; }
  bool empty() const { return rows_.empty(); }
  size_t size() const { return rows_.size(); }
  int64_t bytes() const { return bytes_; }
  void clear() {
    rows_.clear();
    bytes_ = 0;
  }

  // The most bytes of keys and values the store holds; -1 until the engine sets it to the first
  // generation's slot cache, so that keeping rows at most doubles what generation holds.
  int64_t budget_bytes = -1;
  int64_t dropped_rows = 0;  // rows not kept for the budget (their next turn prefilled again)
  // What resumed rows saved: tokens not prefilled again, and rows resumed.
  int64_t reused_tokens = 0;
  int64_t resumed_rows = 0;

 private:
  static int64_t bytes_of(const Row& row) {
    int64_t bytes = 0;
    for (const auto* tensors : {&row.keys, &row.values})
      for (const auto& t : *tensors) bytes += static_cast<int64_t>(t.nbytes());
    return bytes;
  }
  std::unordered_map<int64_t, Row> rows_;
  int64_t bytes_ = 0;
};

}  // namespace rayless
