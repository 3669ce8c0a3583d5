// The global entropy threshold of TRL's top_entropy_quantile masking, computed across ranks: the
// q-quantile (linear interpolation, torch.quantile's default) of the entropies of all active tokens
// on all ranks. Two methods give bit-identical results:
//   "gather": counts exchanged (one integer per rank), local values padded to the largest count,
//             one padded allgather, padding dropped by the known counts, exact quantile by selection.
//   "select": distributed radix selection on order-preserving uint32 keys of the float32 values: a
//             few rounds of bucket-count histograms allreduced; bytes per rank do not grow with the
//             number of tokens.
// Every rank must call it (a collective), also ranks with no active tokens (an empty tensor).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <limits>

#include "rayless/base/choices.h"

namespace rayless {

class Communicator;

// local_entropies: 1-D float32 tensor of this rank's active tokens only (CPU with MPI; CUDA with the
// NCCL backend, "gather" only moves the data on the device). As in TRL, the threshold is the quantile
// at level 1 - top_entropy_quantile of all ranks' values (top_entropy_quantile = 0.2 keeps the 20 %
// highest-entropy tokens: mask = entropy >= threshold). When no rank has any token the value is
// +infinity, so the mask is all false (TRL returns an all-false mask then).
struct EntropyThreshold {
  float value = std::numeric_limits<float>::infinity();
  int64_t bytes = 0;  // bytes this rank sent + received in the collectives (benchmarks)
};
EntropyThreshold global_entropy_threshold(Communicator& comm, const torch::Tensor& local_entropies,
                                          double top_entropy_quantile, EntropyThresholdMethod method);

}  // namespace rayless
