// The global entropy threshold: "gather" (counts, padded gather, selection) and "select"
// (distributed radix selection by histogram allreduces). Both end in the grpo module's
// quantile_rank + interpolate_quantile, so they return the same float32 bit for bit.
#include "rayless/grpo/entropy_threshold.h"

#include <torch/types.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rayless/comm/communicator.h"
#include "rayless/base/error.h"
#include "rayless/grpo/entropy_mask.h"

namespace rayless {

namespace {

// Order-preserving map float32 -> uint32: negative floats have their bits flipped, positive ones
// get the sign bit set, so unsigned comparison of keys = numeric comparison of (non-NaN) floats.
uint32_t key_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

float value_of(uint32_t key) {
  uint32_t bits = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// The counts, one padded gather and the padding dropped by the counts (Communicator::allgather_variable,
// on the values' device: NCCL for CUDA tensors), then the exact quantile by selection.
EntropyThreshold threshold_by_gather(Communicator& comm, const torch::Tensor& local, double q) {
  const std::vector<torch::Tensor> pieces = comm.allgather_variable(local);
  int64_t total = 0, largest = 0;
  for (const auto& piece : pieces) {
    total += piece.numel();
    largest = std::max(largest, piece.numel());
  }
  const int64_t size = comm.size();
  EntropyThreshold out;
  out.bytes = 16 * (1 + size);  // (rows, row size) per rank
  if (total == 0) return out;   // every rank saw the same counts: nobody gathered
  out.bytes += 4 * largest * (1 + size);
  out.value = entropy_quantile(torch::cat(pieces).to(torch::kCPU), q);
  return out;
}

// Radix selection over 8-bit digits of the keys, most significant first. Each round allreduces the
// digit histograms of the candidates still matching the prefix found so far, for the two order
// statistics the interpolation needs; 4 rounds fix all 32 bits.
EntropyThreshold threshold_by_select(Communicator& comm, const torch::Tensor& local, double q) {
  EntropyThreshold out;
  int64_t& bytes = out.bytes;
  constexpr int kBuckets = 256;
  torch::Tensor host = local.to(torch::kCPU).contiguous();
  const float* data = host.data_ptr<float>();
  std::vector<uint32_t> keys;
  keys.reserve(host.numel());
  int64_t nan_count = 0;
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (std::isnan(data[i]))
      ++nan_count;
    else
      keys.push_back(key_of(data[i]));
  }
  // round 1: the top digit of every key, plus the NaN count (the total comes for free)
  torch::Tensor first = torch::zeros({kBuckets + 1}, torch::kInt64);
  int64_t* h = first.data_ptr<int64_t>();
  for (uint32_t key : keys) ++h[key >> 24];
  h[kBuckets] = nan_count;
  comm.allreduce(first, ReduceOp::Sum);
  bytes += 2 * first.numel() * 8;
  if (h[kBuckets] > 0) {  // as torch.quantile
    out.value = std::numeric_limits<float>::quiet_NaN();
    return out;
  }
  int64_t total = 0;
  for (int b = 0; b < kBuckets; ++b) total += h[b];
  if (total == 0) return out;
  const QuantileRank rank = quantile_rank(total, q);

  struct Target {
    int64_t position;    // order statistic still to find among the candidates with `prefix`
    uint32_t prefix = 0;  // digits found so far
  };
  Target targets[2] = {{rank.below}, {rank.above}};
  auto descend = [&](Target& t, const int64_t* histogram) {
    int64_t before = 0;
    for (int b = 0; b < kBuckets; ++b) {
      if (t.position < before + histogram[b]) {
        t.position -= before;
        t.prefix = (t.prefix << 8) | static_cast<uint32_t>(b);
        return;
      }
      before += histogram[b];
    }
    runtimeCheck(false, "entropy threshold (select): position ", t.position, " beyond the histogram");
  };
  descend(targets[0], h);
  descend(targets[1], h);

  for (int shift = 16; shift >= 0; shift -= 8) {
    // both targets share a prefix most of the time: one histogram then (known on every rank alike)
    const bool shared = targets[0].prefix == targets[1].prefix;
    const int histograms = shared ? 1 : 2;
    torch::Tensor counts = torch::zeros({histograms * kBuckets}, torch::kInt64);
    int64_t* hc = counts.data_ptr<int64_t>();
    const int prefix_shift = shift + 8;
    for (uint32_t key : keys) {
      const uint32_t top = key >> prefix_shift;
      const uint32_t digit = (key >> shift) & 0xffu;
      if (top == targets[0].prefix) ++hc[digit];
      if (!shared && top == targets[1].prefix) ++hc[kBuckets + digit];
    }
    comm.allreduce(counts, ReduceOp::Sum);
    bytes += 2 * counts.numel() * 8;
    descend(targets[0], hc);
    descend(targets[1], shared ? hc : hc + kBuckets);
  }
  out.value = interpolate_quantile(value_of(targets[0].prefix), value_of(targets[1].prefix), rank);
  return out;
}

}  // namespace

EntropyThreshold global_entropy_threshold(Communicator& comm, const torch::Tensor& local_entropies,
                                          double top_entropy_quantile, EntropyThresholdMethod method) {
  inputCheck(top_entropy_quantile >= 0.0 && top_entropy_quantile <= 1.0, "grpo.top_entropy_quantile = ",
             top_entropy_quantile, " is outside [0, 1]");
  runtimeCheck(local_entropies.dim() == 1 && local_entropies.scalar_type() == torch::kFloat32,
               "global_entropy_threshold: expects a 1-D float32 tensor, got ", local_entropies.sizes(), " ",
               local_entropies.scalar_type());
  const double q = 1.0 - top_entropy_quantile;
  torch::Tensor local = local_entropies.detach().contiguous();
  return method == EntropyThresholdMethod::Gather ? threshold_by_gather(comm, local, q) : threshold_by_select(comm, local, q);
}

}  // namespace rayless
