#include "rayless/rollout/rollout_batch.h"

#include <torch/types.h>

#include <algorithm>

namespace rayless {

int64_t RolloutBatch::prompt_width() const {
  int64_t width = 0;
  for (const auto& p : prompt_ids) width = std::max<int64_t>(width, static_cast<int64_t>(p.size()));
  return width;
}

torch::Tensor RolloutBatch::model_lengths() const {
  if (!tool_mask.defined()) return raw_lengths;
  const torch::Tensor real = torch::arange(completion_ids.size(1)).unsqueeze(0) < raw_lengths.unsqueeze(1);
  return (tool_mask * real.to(torch::kFloat32)).sum(1).to(torch::kInt64);
}

Rollouts pack_rollouts(const RolloutBatch& batch, int64_t rank, const RolloutExtras& extras) {
  const int64_t N = batch.size();
  Rollouts r;
  r.step = batch.generation_step;
  r.rank = rank;
  std::vector<int64_t> flat_prompts, prompt_offsets{0}, completion_offsets{0};
  for (int64_t i = 0; i < N; ++i) {
    const auto& p = batch.prompt_ids[static_cast<size_t>(i)];
    flat_prompts.insert(flat_prompts.end(), p.begin(), p.end());
    prompt_offsets.push_back(static_cast<int64_t>(flat_prompts.size()));
    completion_offsets.push_back(completion_offsets.back() + batch.raw_lengths[i].item<int64_t>());
  }
  // rows unpadded: tokens up to and including EOS
  const int64_t T = batch.completion_ids.size(1);
  const torch::Tensor real = torch::arange(T).unsqueeze(0) < batch.raw_lengths.unsqueeze(1);  // [N, T]
  auto flat = [&](const torch::Tensor& padded) { return padded.cpu().masked_select(real).contiguous(); };
  auto i64 = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); };
  r.prompt_ids = i64(flat_prompts);
  r.prompt_offsets = i64(prompt_offsets);
  r.completion_ids = flat(batch.completion_ids);
  r.completion_offsets = i64(completion_offsets);
  r.group_index = i64(batch.group_index);
  r.rewards_per_func = extras.rewards_per_func.to(torch::kFloat64);
  r.rewards = extras.rewards.to(torch::kFloat64);
  r.advantages = batch.advantages;
  r.completion_mask = flat(batch.completion_mask).to(torch::kBool);
  if (batch.old_logps.defined()) r.old_logps = flat(batch.old_logps);
  else if (extras.sampling_logps.defined()) r.old_logps = flat(extras.sampling_logps);
  if (extras.entropies.defined()) r.entropies = flat(extras.entropies);
  if (batch.ref_logps.defined()) r.ref_logps = flat(batch.ref_logps);
  if (batch.sampling_logps.defined()) r.sampling_logps = flat(batch.sampling_logps);
  r.truncated = batch.truncated;
  r.policy_version = batch.policy_version;
  if (batch.tool_mask.defined()) r.tool_mask = flat(batch.tool_mask).to(torch::kBool);
  r.conversations = extras.conversations;
  return r;
}

torch::Tensor padded_rows(const torch::Tensor& flat, const torch::Tensor& offsets, int64_t width, double fill) {
  if (!flat.defined()) return {};
  const torch::Tensor o = offsets.to(torch::kInt64);
  const int64_t n = o.size(0) - 1;
  const torch::Tensor lengths = o.slice(0, 1) - o.slice(0, 0, n);
  const torch::Tensor real = torch::arange(width).unsqueeze(0) < lengths.unsqueeze(1);
  torch::Tensor out = torch::full({n, width}, fill, flat.options());
  out.masked_scatter_(real, flat);
  return out;
}

RolloutBatch unpack_rollouts(const Rollouts& r, int64_t completion_width, int64_t pad_id) {
  RolloutBatch batch;
  batch.generation_step = r.step;
  const int64_t N = r.size();
  const int64_t T = completion_width;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t a = r.prompt_offsets[i].item<int64_t>(), b = r.prompt_offsets[i + 1].item<int64_t>();
    auto slice = r.prompt_ids.slice(0, a, b).contiguous();
    batch.prompt_ids.emplace_back(slice.data_ptr<int64_t>(), slice.data_ptr<int64_t>() + (b - a));
  }
  auto groups = r.group_index.contiguous();
  batch.group_index.assign(groups.data_ptr<int64_t>(), groups.data_ptr<int64_t>() + N);
  const torch::Tensor lengths = r.completion_offsets.slice(0, 1) - r.completion_offsets.slice(0, 0, N);
  const torch::Tensor real = torch::arange(T).unsqueeze(0) < lengths.unsqueeze(1);
  auto padded = [&](const torch::Tensor& flat_values, double fill, torch::Dtype dtype) {
    torch::Tensor out = torch::full({N, T}, fill, torch::TensorOptions().dtype(dtype));
    out.masked_scatter_(real, flat_values.to(dtype));
    return out;
  };
  batch.completion_ids = padded(r.completion_ids, static_cast<double>(pad_id), torch::kInt64);
  batch.completion_mask = padded(r.completion_mask, 0.0, torch::kFloat32);
  batch.truncated = r.truncated.to(torch::kBool);
  batch.raw_lengths = lengths.to(torch::kInt64);
  batch.advantages = r.advantages.to(torch::kFloat32);
  // stored in the precision they were computed in, so the reused values are bit-identical
  if (r.old_logps.defined()) batch.old_logps = padded(r.old_logps, 0.0, r.old_logps.scalar_type());
  if (r.ref_logps.defined()) batch.ref_logps = padded(r.ref_logps, 0.0, r.ref_logps.scalar_type());
  if (r.sampling_logps.defined()) batch.sampling_logps = padded(r.sampling_logps, 0.0, r.sampling_logps.scalar_type());
  batch.policy_version = r.policy_version;
  if (r.tool_mask.defined()) batch.tool_mask = padded(r.tool_mask, 1.0, torch::kFloat32);  // TRL pads it with 1
  return batch;
}

}  // namespace rayless
