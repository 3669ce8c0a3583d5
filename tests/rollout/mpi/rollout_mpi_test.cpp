// Rollouts gathered across ranks under mpiexec (np 1..4): generation ranks send their shares, training
// ranks nothing, and every rank gets the shares joined in rank order.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "mpi_test_runtime.h"
#include "rayless/rollout/rollout_exchange.h"

using namespace rayless;

namespace {
// rank r's share: r + 1 rows of r + 2 tokens each (odd ranks send nothing)
Rollouts share_of(int r) {
  Rollouts s;
  if (r % 2 == 1) return s;
  const int64_t n = r + 1, t = r + 2;
  s.step = 5;
  s.rank = r;
  s.policy_version = 2;
  s.prompt_ids = torch::full({n}, r, torch::kInt64);
  s.prompt_offsets = torch::arange(n + 1, torch::kInt64);
  s.completion_ids = torch::arange(n * t, torch::kInt64) + 1000 * r;
  s.completion_offsets = torch::arange(n + 1, torch::kInt64) * t;
  s.group_index = torch::full({n}, r, torch::kInt64);
  s.rewards_per_func = torch::full({n, 1}, static_cast<double>(r), torch::kFloat64);
  s.rewards = torch::full({n}, static_cast<double>(r), torch::kFloat64);
  s.advantages = torch::zeros({n}, torch::kFloat32);
  s.completion_mask = torch::ones({n * t}, torch::kBool);
  s.truncated = torch::zeros({n}, torch::kBool);
  s.sampling_logps = -torch::arange(n * t, torch::kFloat32) / 10 - r;
  return s;
}
}  // namespace

TEST_CASE("allgather_rollouts joins every rank's share in rank order") {
  auto comm = test::mpi();
  const Rollouts all = allgather_rollouts(*comm, share_of(comm->rank()));
  std::vector<Rollouts> expected;
  for (int r = 0; r < comm->size(); ++r)
    if (r % 2 == 0) expected.push_back(share_of(r));
  const Rollouts want = join_rollouts(expected);
  CHECK(all.step == 5);
  CHECK(all.policy_version == 2);
  CHECK(torch::equal(all.completion_ids, want.completion_ids));
  CHECK(torch::equal(all.completion_offsets, want.completion_offsets));
  CHECK(torch::equal(all.group_index, want.group_index));
  CHECK(torch::equal(all.sampling_logps, want.sampling_logps));
  CHECK(torch::equal(all.rewards_per_func, want.rewards_per_func));
}
