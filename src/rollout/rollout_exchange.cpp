#include "rayless/rollout/rollout_exchange.h"

#include <cstring>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"

namespace rayless {

namespace {

constexpr int64_t kMagic = 0x31534c52;  // "RLS1"

// Every tensor of a Rollouts record, in the order they travel.
std::vector<torch::Tensor*> fields(Rollouts& r) {
  return {&r.prompt_ids, &r.prompt_offsets, &r.completion_ids, &r.completion_offsets, &r.group_index,
          &r.rewards_per_func, &r.rewards, &r.advantages, &r.old_logps, &r.entropies, &r.completion_mask,
          &r.ref_logps, &r.truncated, &r.sampling_logps, &r.nonfinite_logits};
}

int64_t padded(int64_t bytes) { return (bytes + 7) / 8 * 8; }

}  // namespace

torch::Tensor rollouts_to_bytes(const Rollouts& in) {
  if (in.size() == 0) return torch::empty({0}, torch::kUInt8);
  Rollouts r = in;
  const std::vector<torch::Tensor*> all = fields(r);
  // header: magic, step, rank, policy_version, then per tensor: present, dtype, rows, columns (-1: 1-D)
  std::vector<int64_t> header{kMagic, r.step, r.rank, r.policy_version, static_cast<int64_t>(all.size())};
  int64_t data_bytes = 0;
  for (torch::Tensor* t : all) {
    if (t->defined()) *t = t->contiguous().cpu();
    header.push_back(t->defined() ? 1 : 0);
    header.push_back(t->defined() ? static_cast<int64_t>(t->scalar_type()) : 0);
    header.push_back(t->defined() ? t->size(0) : 0);
    header.push_back(t->defined() && t->dim() == 2 ? t->size(1) : -1);
    if (t->defined()) data_bytes += padded(t->numel() * t->element_size());
  }
  const int64_t header_bytes = static_cast<int64_t>(header.size() * sizeof(int64_t));
  torch::Tensor bytes = torch::zeros({header_bytes + data_bytes}, torch::kUInt8);
  auto* out = bytes.data_ptr<uint8_t>();
  std::memcpy(out, header.data(), static_cast<size_t>(header_bytes));
  int64_t at = header_bytes;
  for (torch::Tensor* t : all) {
    if (!t->defined()) continue;
    const int64_t n = t->numel() * t->element_size();
    if (n > 0) std::memcpy(out + at, t->data_ptr(), static_cast<size_t>(n));
    at += padded(n);
  }
  return bytes;
}

Rollouts rollouts_from_bytes(const torch::Tensor& bytes_in, const std::string& where) {
  Rollouts r;
  if (bytes_in.numel() == 0) return r;
  const torch::Tensor bytes = bytes_in.contiguous().cpu();
  const auto* in = bytes.data_ptr<uint8_t>();
  const int64_t size = bytes.numel();
  auto read_i64 = [&](int64_t index) {
    runtimeCheck((index + 1) * 8 <= size, where, ": rollouts cut short (", size, " bytes)");
    int64_t v;
    std::memcpy(&v, in + index * 8, sizeof v);
    return v;
  };
  runtimeCheck(read_i64(0) == kMagic, where, ": not a rollouts record");
  r.step = read_i64(1);
  r.rank = read_i64(2);
  r.policy_version = read_i64(3);
  const std::vector<torch::Tensor*> all = fields(r);
  runtimeCheck(read_i64(4) == static_cast<int64_t>(all.size()), where, ": a rollouts record of another layout");
  int64_t at = (5 + 4 * static_cast<int64_t>(all.size())) * 8;
  for (size_t i = 0; i < all.size(); ++i) {
    const int64_t base = 5 + 4 * static_cast<int64_t>(i);
    if (read_i64(base) == 0) continue;
    const auto dtype = static_cast<torch::ScalarType>(read_i64(base + 1));
    const int64_t rows = read_i64(base + 2), columns = read_i64(base + 3);
    torch::Tensor t = columns < 0 ? torch::empty({rows}, torch::TensorOptions().dtype(dtype))
                                  : torch::empty({rows, columns}, torch::TensorOptions().dtype(dtype));
    const int64_t n = t.numel() * t.element_size();
    runtimeCheck(rows >= 0 && at + n <= size, where, ": rollouts cut short (", size, " bytes)");
    if (n > 0) std::memcpy(t.data_ptr(), in + at, static_cast<size_t>(n));
    at += padded(n);
    *all[i] = t;
  }
  r.validate(where);
  return r;
}

Rollouts allgather_rollouts(Communicator& comm, const Rollouts& mine) {
  const std::vector<torch::Tensor> parts = comm.allgather_variable(rollouts_to_bytes(mine));
  std::vector<Rollouts> received;
  for (size_t i = 0; i < parts.size(); ++i)
    if (parts[i].numel() > 0) received.push_back(rollouts_from_bytes(parts[i], str("rollouts from rank ", i)));
  return join_rollouts(received);
}

Rollouts join_rollouts(const std::vector<Rollouts>& parts) {
  Rollouts out;
  if (parts.empty()) return out;
  out.step = parts[0].step;
  out.rank = parts[0].rank;
  out.policy_version = parts[0].policy_version;
  auto join = [&](auto member) {
    std::vector<torch::Tensor> pieces;
    for (const Rollouts& p : parts) {
      const torch::Tensor& t = p.*member;
      if (!t.defined()) return torch::Tensor();
      pieces.push_back(t);
    }
    return torch::cat(pieces, 0);
  };
  auto offsets = [&](torch::Tensor Rollouts::*member) {
    std::vector<torch::Tensor> pieces{torch::zeros({1}, torch::kInt64)};
    int64_t base = 0;
    for (const Rollouts& p : parts) {
      const torch::Tensor o = (p.*member).to(torch::kInt64);
      pieces.push_back(o.slice(0, 1) + base);
      base += o[-1].item<int64_t>();
    }
    return torch::cat(pieces, 0);
  };
  out.prompt_ids = join(&Rollouts::prompt_ids);
  out.prompt_offsets = offsets(&Rollouts::prompt_offsets);
  out.completion_ids = join(&Rollouts::completion_ids);
  out.completion_offsets = offsets(&Rollouts::completion_offsets);
  out.group_index = join(&Rollouts::group_index);
  out.rewards_per_func = join(&Rollouts::rewards_per_func);
  out.rewards = join(&Rollouts::rewards);
  out.advantages = join(&Rollouts::advantages);
  out.old_logps = join(&Rollouts::old_logps);
  out.entropies = join(&Rollouts::entropies);
  out.completion_mask = join(&Rollouts::completion_mask);
  out.ref_logps = join(&Rollouts::ref_logps);
  out.truncated = join(&Rollouts::truncated);
  out.sampling_logps = join(&Rollouts::sampling_logps);
  out.nonfinite_logits = join(&Rollouts::nonfinite_logits);
  out.validate("joined rollouts");
  return out;
}

Rollouts slice_rollouts(const Rollouts& r, int64_t first, int64_t last) {
  runtimeCheck(0 <= first && first <= last && last <= r.size(), "slice_rollouts: rows [", first, ", ", last, ") of ",
               r.size());
  Rollouts out;
  out.step = r.step;
  out.rank = r.rank;
  out.policy_version = r.policy_version;
  const torch::Tensor po = r.prompt_offsets.to(torch::kInt64), co = r.completion_offsets.to(torch::kInt64);
  const int64_t p0 = po[first].item<int64_t>(), p1 = po[last].item<int64_t>();
  const int64_t c0 = co[first].item<int64_t>(), c1 = co[last].item<int64_t>();
  auto rows = [&](const torch::Tensor& t) { return t.defined() ? t.slice(0, first, last).clone() : torch::Tensor(); };
  auto tokens = [&](const torch::Tensor& t) { return t.defined() ? t.slice(0, c0, c1).clone() : torch::Tensor(); };
  out.prompt_ids = r.prompt_ids.slice(0, p0, p1).clone();
  out.prompt_offsets = po.slice(0, first, last + 1) - p0;
  out.completion_ids = tokens(r.completion_ids);
  out.completion_offsets = co.slice(0, first, last + 1) - c0;
  out.group_index = rows(r.group_index);
  out.rewards_per_func = rows(r.rewards_per_func);
  out.rewards = rows(r.rewards);
  out.advantages = rows(r.advantages);
  out.old_logps = tokens(r.old_logps);
  out.entropies = tokens(r.entropies);
  out.completion_mask = tokens(r.completion_mask);
  out.ref_logps = tokens(r.ref_logps);
  out.truncated = rows(r.truncated);
  out.sampling_logps = tokens(r.sampling_logps);
  out.nonfinite_logits = rows(r.nonfinite_logits);
  return out;
}

}  // namespace rayless
