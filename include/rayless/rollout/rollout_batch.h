// One rank's share of one generation in the padded [N, T] layout the trainer computes on, and its
// packing into the store's unpadded Rollouts (rollout_store.h) and back: a μ > 1 cycle resumed in the
// middle reads its generation back instead of regenerating it, bit for bit.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "rayless/rollout/rollout_store.h"

namespace rayless {

struct RolloutBatch {
  int64_t generation_step = 0;
  std::vector<std::vector<int64_t>> prompt_ids;  // per completion (a prompt repeated for its generations)
  std::vector<int64_t> group_index;              // the prompt group of each completion
  torch::Tensor completion_ids;                  // [N, T] int64, padding after the end
  torch::Tensor completion_mask;                 // [N, T] float32, truncation masking applied
  torch::Tensor raw_lengths;                     // [N] int64: tokens up to and including EOS, before masking
  torch::Tensor truncated;                       // [N] bool
  torch::Tensor advantages;                      // [N] float32
  torch::Tensor old_logps;                       // [N, T] or undefined (μ = 1 skips the pass)
  torch::Tensor ref_logps;                       // [N, T] when beta > 0
  // completions sampled by another engine (generation ranks, a replay file with log-probs): the
  // sampler's log-probs [N, T], and TRL's importance ratio of old to sampling log-probs ([N, T] or
  // [N, 1]) when grpo.vllm_importance_sampling_correction applies; undefined otherwise
  torch::Tensor sampling_logps;
  torch::Tensor importance_sampling_ratio;
  int64_t policy_version = -1;                   // optimizer steps done by the policy that sampled them
  torch::Tensor tool_mask;                       // [N, T] float32, tools/environment runs: 1 = the model's token
                                                 // (the loss and the ratio see completion_mask x tool_mask)
  int64_t num_items_in_batch = 0;                // active completion tokens of the whole generation, all ranks

  int64_t size() const { return completion_ids.defined() ? completion_ids.size(0) : 0; }
  int64_t prompt_width() const;  // the longest prompt: TRL's padding of the whole generation batch
  // What the loss counts: completion_mask, times tool_mask when there is one.
  torch::Tensor loss_mask() const { return tool_mask.defined() ? completion_mask * tool_mask : completion_mask; }
  // [N] int64 completion lengths as TRL logs them: raw_lengths, counting only the model's tokens when
  // there is a tool mask.
  torch::Tensor model_lengths() const;
};

// What the store keeps beside the batch: not needed to train on it again, but to inspect it.
struct RolloutExtras {
  torch::Tensor rewards_per_func;  // [N, K]
  torch::Tensor rewards;           // [N] weighted sums
  torch::Tensor entropies;         // [N, T] or undefined
  torch::Tensor sampling_logps;    // [N, T] the sampler's, stored as old_logps when the batch has none
  std::vector<std::string> conversations;  // [N] tools/environment runs: AgentRollout::record() as JSON
};

Rollouts pack_rollouts(const RolloutBatch& batch, int64_t rank, const RolloutExtras& extras);
// One value per completion token, back to rows: flat [T] with offsets [N + 1] -> [N, width] in flat's
// dtype, `fill` after each row's end (undefined in, undefined out).
torch::Tensor padded_rows(const torch::Tensor& flat, const torch::Tensor& offsets, int64_t width, double fill);
// Back to the padded layout of width T = completion_width with pad_id after each row's end.
RolloutBatch unpack_rollouts(const Rollouts& rollouts, int64_t completion_width, int64_t pad_id);

}  // namespace rayless
