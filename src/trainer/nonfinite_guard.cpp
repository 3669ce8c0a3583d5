#include "rayless/trainer/nonfinite_guard.h"

#include <limits>

#include "rayless/comm/communicator.h"

namespace rayless {

NonfiniteGuard::NonfiniteGuard(torch::Device device)
    : flags_(torch::zeros({kSources}, torch::TensorOptions().dtype(torch::kFloat32).device(device))) {}

const char* NonfiniteGuard::name(Source source) {
  switch (source) {
    case kLogits: return "logits in generation";
    case kRewards: return "rewards";
    case kLogprobs: return "log-probs";
    case kLoss: return "loss";
    case kLossMetrics: return "loss metrics (kl, entropy, clip ratios)";
    default: return "?";
  }
}

void NonfiniteGuard::check(Source source, const torch::Tensor& values) {
  if (!values.defined() || values.numel() == 0) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor bad = torch::isfinite(values.detach()).all().logical_not().to(flags_.device(), torch::kFloat32);
  flags_.narrow(0, source, 1).clamp_min_(bad.reshape({1}));
}

void NonfiniteGuard::raise(Source source, bool raised) {
  if (raised) flags_.narrow(0, source, 1).fill_(1.0);
}

void NonfiniteGuard::note_rows(const torch::Tensor& bad, const std::vector<int64_t>& dataset_rows,
                               const torch::Tensor& rewards) {
  // the rewards are scored on the host: a host tensor already
  rows_.push_back({bad.detach(), dataset_rows, rewards.defined() ? rewards.detach().to(torch::kCPU, torch::kFloat64) : rewards});
}

torch::Tensor NonfiniteGuard::reduce_flags(Communicator& comm) {
  torch::Tensor flags = comm.in_collective_memory(flags_.clone());
  comm.allreduce(flags, ReduceOp::Max);
  flags_.zero_();
  return flags;
}

std::vector<std::string> NonfiniteGuard::raised(const double* flags) {
  std::vector<std::string> out;
  for (int s = 0; s < kSources; ++s)
    if (flags[s] > 0) out.push_back(name(static_cast<Source>(s)));
  return out;
}

torch::Tensor NonfiniteGuard::gather_rows(Communicator& comm, int64_t reward_columns, int64_t limit) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> marked, all;  // flattened [n, 2 + K]
  for (const KeptRows& kept : rows_) {
    const torch::Tensor bad = kept.bad.to(torch::kCPU, torch::kBool);
    for (size_t i = 0; i < kept.dataset_rows.size(); ++i) {
      const bool is_bad = bad[static_cast<int64_t>(i)].item<bool>();
      std::vector<double>& into = is_bad ? marked : all;
      into.push_back(static_cast<double>(kept.dataset_rows[i]));
      into.push_back(is_bad ? 1.0 : 0.0);
      for (int64_t k = 0; k < reward_columns; ++k)
        into.push_back(kept.rewards.defined() && k < kept.rewards.size(1) ? kept.rewards[static_cast<int64_t>(i)][k].item<double>()
                                                                          : nan);
    }
  }
  rows_.clear();
  const int64_t width = 2 + reward_columns;
  // marked rows when any rank has one, else every row of the step
  const bool any_marked = global_max(comm, marked.empty() ? 0.0 : 1.0) > 0;
  std::vector<double>& chosen = any_marked ? marked : all;
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(chosen.size()) / width, limit);
  const torch::Tensor local = torch::tensor(std::vector<double>(chosen.begin(), chosen.begin() + n * width), torch::kFloat64);
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& part : comm.allgather_variable(local)) parts.push_back(part.view({-1, width}));
  const torch::Tensor gathered = torch::cat(parts, 0);
  return gathered.slice(0, 0, std::min<int64_t>(gathered.size(0), limit));
}

}  // namespace rayless
