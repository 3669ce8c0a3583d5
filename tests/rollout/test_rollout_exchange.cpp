// Rollouts as they travel from generation ranks to training ranks: bytes and back, joined and cut.
#include <catch2/catch.hpp>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"
#include "rayless/rollout/rollout_exchange.h"

using namespace rayless;

namespace {
// rows of lengths 2, 3, 1 (prompts of 2, 1, 3 tokens); seed varies the values
Rollouts sample(int seed, bool optional_tensors) {
  torch::manual_seed(seed);
  Rollouts r;
  r.step = 4;
  r.rank = seed;
  r.policy_version = 3;
  r.prompt_ids = torch::randint(0, 100, {6}, torch::kInt64);
  r.prompt_offsets = torch::tensor({0, 2, 3, 6}, torch::kInt64);
  r.completion_ids = torch::randint(0, 100, {6}, torch::kInt64);
  r.completion_offsets = torch::tensor({0, 2, 5, 6}, torch::kInt64);
  r.group_index = torch::tensor({7, 7, 9}, torch::kInt64);
  r.rewards_per_func = torch::randn({3, 2}, torch::kFloat64);
  r.rewards = torch::randn({3}, torch::kFloat64);
  r.advantages = torch::randn({3}, torch::kFloat32);
  r.completion_mask = torch::tensor({1, 1, 1, 1, 0, 1}, torch::kBool);
  r.truncated = torch::tensor({0, 1, 0}, torch::kBool);
  if (optional_tensors) {
    r.sampling_logps = torch::randn({6}, torch::kFloat32);
    r.entropies = torch::rand({6}, torch::kFloat32);
    r.old_logps = torch::randn({6}, torch::kFloat64);
    r.nonfinite_logits = torch::tensor({0, 0, 1}, torch::kBool);
  }
  return r;
}

void check_same(const Rollouts& a, const Rollouts& b) {
  CHECK(a.step == b.step);
  CHECK(a.policy_version == b.policy_version);
  for (auto member : {&Rollouts::prompt_ids, &Rollouts::prompt_offsets, &Rollouts::completion_ids,
                      &Rollouts::completion_offsets, &Rollouts::group_index, &Rollouts::rewards_per_func,
                      &Rollouts::rewards, &Rollouts::advantages, &Rollouts::old_logps, &Rollouts::entropies,
                      &Rollouts::completion_mask, &Rollouts::ref_logps, &Rollouts::truncated, &Rollouts::sampling_logps,
                      &Rollouts::nonfinite_logits}) {
    REQUIRE((a.*member).defined() == (b.*member).defined());
    if ((a.*member).defined()) {
      CHECK((a.*member).scalar_type() == (b.*member).scalar_type());
      CHECK(torch::equal(a.*member, b.*member));
    }
  }
}
}  // namespace

TEST_CASE("rollouts to bytes and back: every tensor, its dtype and the optional ones") {
  for (bool optional : {false, true}) {
    const Rollouts r = sample(1, optional);
    const torch::Tensor bytes = rollouts_to_bytes(r);
    CHECK(bytes.scalar_type() == torch::kUInt8);
    check_same(rollouts_from_bytes(bytes, "test"), r);
  }
  CHECK(rollouts_to_bytes(Rollouts{}).numel() == 0);
  CHECK(rollouts_from_bytes(torch::empty({0}, torch::kUInt8), "test").size() == 0);
  // a cut record is refused, never read past its end
  const torch::Tensor bytes = rollouts_to_bytes(sample(1, true));
  CHECK_THROWS_AS(rollouts_from_bytes(bytes.slice(0, 0, bytes.numel() - 16), "test"), RuntimeError);
  CHECK_THROWS_AS(rollouts_from_bytes(torch::zeros({64}, torch::kUInt8), "test"), RuntimeError);
}

TEST_CASE("join then slice gives each part back, offsets rebased") {
  const Rollouts a = sample(1, true), b = sample(2, true);
  const Rollouts joined = join_rollouts({a, b});
  CHECK(joined.size() == 6);
  CHECK(joined.completion_offsets[6].item<int64_t>() == 12);
  CHECK(joined.prompt_offsets[4].item<int64_t>() == 8);
  Rollouts first = slice_rollouts(joined, 0, 3), second = slice_rollouts(joined, 3, 6);
  first.rank = a.rank;
  second.rank = b.rank;
  check_same(first, a);
  check_same(second, b);
  // an optional tensor survives only when every part has it
  CHECK_FALSE(join_rollouts({sample(1, true), sample(2, false)}).sampling_logps.defined());
}

TEST_CASE("allgather over one process is the rollouts themselves") {
  auto comm = make_single_communicator();
  const Rollouts r = sample(3, true);
  check_same(allgather_rollouts(*comm, r), r);
  CHECK(allgather_rollouts(*comm, Rollouts{}).size() == 0);
}
