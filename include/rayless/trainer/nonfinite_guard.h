// The guard against non-finite steps. What a step is made of is checked as it is computed: a
// generation's logits (the sampler marks rows whose logits held a NaN or an infinity) and rewards (an
// infinity), each micro-step's per-token log-probs, its loss and its metrics' sums. The checks raise
// flags in one small tensor on the device, with no host sync; at the optimizer step one allreduce
// gives every rank the same answer before the update, read with the step's other values, so all
// ranks skip it alike (weights, AdamW state and the schedule untouched; optimizer.h) or all apply it.
// The grad norm, already the same on every rank, is the last check (Optimizer::apply_gradients). The
// rows that produced a non-finite value are kept, with their reward columns, to be named in the log.
//
// The flags are one [kSources] tensor so that a step's other figures can travel in the same reduction.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rayless {

class Communicator;

class NonfiniteGuard {
 public:
  // The flags live on `device` (the rank's): checks of tensors there need no copy to the host.
  explicit NonfiniteGuard(torch::Device device = torch::kCPU);
  enum Source : int { kLogits = 0, kRewards, kLogprobs, kLoss, kLossMetrics, kSources };
  static const char* name(Source source);  // "logits in generation", "rewards", ...

  // Raises `source` on this rank when `values` holds a NaN or an infinity (no host sync).
  void check(Source source, const torch::Tensor& values);
  // Raises `source` when `raised` (a host fact, e.g. known when a generation was scored).
  void raise(Source source, bool raised = true);
  // Keeps rows of this step for the log: `bad` [B] bool (any device) marks those that produced a
  // non-finite value; dataset_rows [B] their prompt index in the dataset; rewards [B, K] (host) their
  // reward columns (undefined: not known).
  void note_rows(const torch::Tensor& bad, const std::vector<int64_t>& dataset_rows, const torch::Tensor& rewards);

  // Collective, once per optimizer step, on every rank: the flags raised on any rank (one max-allreduce
  // where the collectives take them), not read to the host: they travel in the step's one read
  // (step_read.h). Clears the flags.
  torch::Tensor reduce_flags(Communicator& comm);
  // The sources raised, from reduce_flags()'s kSources values read to the host (empty: a finite step).
  static std::vector<std::string> raised(const double* flags);

  // Collective, after agree() found a non-finite step: every rank's rows that produced a non-finite
  // value, or when no row was marked every row of the step, at most `limit` of them, as [n, 2 + K]
  // float64 rows (dataset row, 1 when marked, K reward columns; NaN where not known), the same on every
  // rank. Clears the kept rows.
  torch::Tensor gather_rows(Communicator& comm, int64_t reward_columns, int64_t limit);
  void clear_rows() { rows_.clear(); }

 private:
  struct KeptRows {
    torch::Tensor bad;                  // [B] bool
    std::vector<int64_t> dataset_rows;  // [B]
    torch::Tensor rewards;              // [B, K] or undefined
  };
  torch::Tensor flags_;  // [kSources] float32 on the rank's device (1 = raised)
  std::vector<KeptRows> rows_;
};

}  // namespace rayless
