// New weights from the training ranks to the generation ranks (asynchronous GRPO): rank `root` of a
// communicator that holds it and the generation ranks broadcasts the trainable tensors in buckets
// (one flat tensor per bucket of consecutive tensors of one dtype and device), so no second copy of
// the whole model is ever made. On the wire they keep their dtype, or travel as bfloat16 (half the
// bytes of float32; the receivers then hold rounded weights, the root keeps its own).
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace rayless {

class Communicator;

// Collective over comm; every rank passes tensors of the same shapes in the same order. Returns the
// bytes this rank sent or received.
int64_t broadcast_weights(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root,
                          std::optional<torch::Dtype> wire_dtype, int64_t bucket_bytes);

}  // namespace rayless
