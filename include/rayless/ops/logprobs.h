// Per-token log-probabilities and entropies of chosen tokens without a [B, T, V] log-softmax.
//
// Both paths divide the logits by the sampling temperature first (as TRL does before its
// log-softmax), take logsumexp in float32 or wider (bfloat16/half inputs are upcast chunk by chunk),
// and return the same values and gradients as the naive log_softmax(logits / T).gather(ids).
//
//  - selective_logprobs: the model already produced logits [B, T, V]; rows are processed in chunks so
//    only a [chunk, V] temporary exists besides the logits themselves.
//  - fused_logprobs: from the final hidden states [B, T, H] and the LM head weight [V, H] (+ bias [V]).
//    A custom autograd function applies the LM head chunk by chunk over positions, keeps only the
//    per-position logsumexp, and recomputes each chunk's logits in backward, so no [B, T, V] tensor
//    exists in forward or backward. This is the path training uses (design: no [B, T, V] tensor).
//
// Entropies are returned detached (no gradient), as TRL computes them under no_grad when no entropy
// bonus is used. Returned tensors are float32 for bfloat16/half inputs, else the input dtype.
#pragma once
#include <torch/types.h>

namespace rayless {

struct LogprobsAndEntropies {
  torch::Tensor logps;      // [B, T], differentiable
  torch::Tensor entropies;  // [B, T], detached; entropy of softmax(logits / temperature) in nats
};

// logits [B, T, V], token_ids [B, T] (int64). chunk_rows = rows (positions) per chunk.
torch::Tensor selective_logprobs(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature = 1.0,
                                 int64_t chunk_rows = 256);

// Entropies of softmax(logits / temperature), chunk by chunk, no gradient.
torch::Tensor entropies_from_logits(const torch::Tensor& logits, double temperature = 1.0, int64_t chunk_rows = 256);

// Both of the above from materialised logits.
LogprobsAndEntropies selective_logprobs_and_entropies(const torch::Tensor& logits, const torch::Tensor& token_ids,
                                                      double temperature = 1.0, int64_t chunk_rows = 256);

// hidden [B, T, H], lm_head_weight [V, H], lm_head_bias [V] or an undefined tensor, token_ids [B, T].
// chunk_positions = positions (of all B*T) whose logits are computed at once. Gradients flow to hidden,
// weight and bias (whichever require grad); weight/bias gradients of bfloat16/half parameters are
// accumulated in float32 across chunks and cast once.
LogprobsAndEntropies fused_logprobs(const torch::Tensor& hidden, const torch::Tensor& lm_head_weight,
                                    const torch::Tensor& lm_head_bias, const torch::Tensor& token_ids,
                                    double temperature = 1.0, int64_t chunk_positions = 256);

// The naive reference: full log_softmax over [B, T, V] (tests and the benchmark only).
LogprobsAndEntropies naive_logprobs(const torch::Tensor& logits, const torch::Tensor& token_ids, double temperature = 1.0);

}  // namespace rayless
