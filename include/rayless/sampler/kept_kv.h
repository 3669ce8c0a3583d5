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

  void keep(int64_t global_row, Row row) { rows_[global_row] = std::move(row); }
  // The row's kept state, removed from the store (a resumed row's keys and values move into a slot).
  std::optional<Row> take(int64_t global_row) {
    const auto it = rows_.find(global_row);
    if (it == rows_.end()) return std::nullopt;
    Row row = std::move(it->second);
    rows_.erase(it);
    return row;
  }
  bool contains(int64_t global_row) const { return rows_.count(global_row) > 0; }
  bool empty() const { return rows_.empty(); }
  size_t size() const { return rows_.size(); }
  void clear() { rows_.clear(); }

  // What resumed rows saved: tokens not prefilled again, and rows resumed.
  int64_t reused_tokens = 0;
  int64_t resumed_rows = 0;

 private:
  std::unordered_map<int64_t, Row> rows_;
};

}  // namespace rayless
