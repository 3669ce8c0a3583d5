// Per-token log-probs and entropies of sampled completions under a model: the forward pass behind
// training, the old-log-prob pass and the reference pass.
//
// Two ways to compute the same numbers:
//  - padded: one [B, P + T] forward over left-padded prompt + right-padded completion, as TRL does;
//  - packed (the default): each distinct prompt of the batch is computed once and its keys/values are
//    shared, differentiably, by its generations; of the completions only positions whose hidden state
//    scores a token are computed (nothing after a row's last scored token, no padding). Prompts and
//    completions run in one pass (CausalLMImpl::forward_hidden_sharing_prompts); only the attention
//    sees padded layouts. With G generations per prompt and completions of uneven length this skips
//    most of the arithmetic the padded pass spends on repeated prompts and padding.
// Both feed the fused LM head (no [B, T, V] logits) with logits divided by the temperature.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "rayless/ops/ops.h"
#include "rayless/model/model.h"

namespace rayless {

struct CompletionLogprobOptions {
  int64_t pad_id = 0;
  double temperature = 1.0;
  int64_t chunk_positions = 256;  // LM-head chunk of the fused path
  // Without gradients (the old and reference passes), completions longer than this go through the model
  // this many positions at a time on a KV cache of the prompt and the positions before (0: one pass).
  int64_t sequence_chunk = 0;
  bool packed = true;             // false: the padded [B, P + T] pass
  // Absolute positions (RoPE) as in a row left-padded to this width: prompt token j of a prompt of
  // length n at W - n + j, completion token t at W + t. TRL pads each rank's whole generation batch to
  // its longest prompt and lets transformers number positions 0 .. W + T - 1 across the padding, so
  // this reproduces its rotary tables exactly (attention is relative: the results differ only in
  // float32 rounding of cos/sin). 0: each row's positions start at its first real token.
  int64_t prompt_width = 0;
};

// prompts: token ids per row, unpadded (rows of the same prompt may appear anywhere);
// completion_ids [B, T]; completion_mask [B, T] (nonzero = the token is scored; 1 up to and including
// EOS, all zero for a masked row). Returns [B, T] log-probs (differentiable when grad is enabled) and
// detached entropies; positions outside the mask hold 0 in the packed path and unused values in the
// padded one. With gradient checkpointing on in training the packed pass does not share prompts
// (the checkpointed layers keep no cache): each row computes its real prompt tokens itself.
// Without gradients and with completions longer than options.sequence_chunk, the pass goes along the
// sequence in pieces (the distinct prompts once into a KV cache, repeated for their rows, then each
// piece of the completions on that cache): it holds the cache and one piece's activations, not every
// position's activations and attention masks as long as the sequence squared. The same log-probs to
// float rounding (not with dynamic RoPE, which takes one pass).
ops::LogprobsAndEntropies completion_logprobs(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                         const torch::Tensor& completion_ids, const torch::Tensor& completion_mask,
                                         const CompletionLogprobOptions& options);

}  // namespace rayless
