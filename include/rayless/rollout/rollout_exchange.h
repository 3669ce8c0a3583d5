// Rollouts on the move: how generation ranks hand their shares of a generation to the training ranks
// (asynchronous GRPO). A share is the store's own record (rollout_store.h), so what travels is what
// the generation rank stored; it travels as bytes, counts first (Communicator::allgather_variable),
// and the shares joined in rank order are the whole generation in its row order.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rayless/rollout/rollout_store.h"

namespace rayless {

class Communicator;

// Rollouts <-> a flat uint8 tensor (host byte order: both ends are ranks of one job). An empty
// Rollouts (size() == 0, no group_index) is zero bytes.
torch::Tensor rollouts_to_bytes(const Rollouts& rollouts);
Rollouts rollouts_from_bytes(const torch::Tensor& bytes, const std::string& where);

// Collective over comm: every rank's rollouts (ranks with nothing to send pass an empty Rollouts),
// joined in rank order. step and policy_version are the first sender's.
Rollouts allgather_rollouts(Communicator& comm, const Rollouts& mine);

// The rows of `parts` one after another (offsets rebased). Optional tensors are kept when every
// part with rows has them.
Rollouts join_rollouts(const std::vector<Rollouts>& parts);
// Rows [first, last) (copies).
Rollouts slice_rollouts(const Rollouts& rollouts, int64_t first, int64_t last);

}  // namespace rayless
