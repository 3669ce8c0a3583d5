// New weights from one rank to the others (asynchronous GRPO's weight push, weight_sync.h) under
// mpiexec at np = 1..4: exact in the tensors' own dtype, rounded to bfloat16 when they travel so, the
// root's tensors untouched, buckets of any size.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "mpi_test_runtime.h"
#include "rayless/comm/communicator.h"
#include "rayless/trainer/weight_sync.h"

using namespace rayless;
using rayless::test::mpi;

namespace {
// what the root holds: float32 tensors of several shapes, then a float64 one (a bucket of its own)
std::vector<torch::Tensor> root_weights() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(7);
  return {torch::randn({5, 3}, generator), torch::randn({7}, generator), torch::randn({2, 2, 2}, generator),
          torch::randn({4}, generator).to(torch::kFloat64)};
}
std::vector<torch::Tensor> zeros_like(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(torch::zeros_like(t));
  return out;
}
}  // namespace

TEST_CASE("broadcast_weights: every rank ends with the root's tensors, in any bucket size") {
  auto comm = mpi();
  const int root = comm->size() - 1;  // not rank 0: the root is named, not assumed
  for (const int64_t bucket_bytes : {int64_t{1}, int64_t{40}, int64_t{1} << 20}) {
    const std::vector<torch::Tensor> want = root_weights();
    std::vector<torch::Tensor> mine = comm->rank() == root ? root_weights() : zeros_like(want);
    const int64_t moved = broadcast_weights(*comm, mine, root, std::nullopt, bucket_bytes);
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(mine[i].scalar_type() == want[i].scalar_type());
      CHECK(torch::equal(mine[i], want[i]));
    }
    CHECK(moved == (comm->size() == 1 ? 0 : (15 + 7 + 8) * 4 + 4 * 8));
  }
}

TEST_CASE("broadcast_weights in bfloat16: the receivers hold the root's values rounded, the root its own") {
  auto comm = mpi();
  const std::vector<torch::Tensor> want = root_weights();
  std::vector<torch::Tensor> mine = comm->rank() == 0 ? root_weights() : zeros_like(want);
  const int64_t moved = broadcast_weights(*comm, mine, 0, torch::kBFloat16, 64);
  for (size_t i = 0; i < want.size(); ++i) {
    const torch::Tensor expected = comm->rank() == 0 ? want[i] : want[i].to(torch::kBFloat16).to(want[i].scalar_type());
    CHECK(mine[i].scalar_type() == want[i].scalar_type());
    CHECK(torch::equal(mine[i], expected));
  }
  if (comm->size() > 1) {
    CHECK(moved == (15 + 7 + 8 + 4) * 2);  // half the bytes of float32 on the wire
    if (comm->rank() != 0) CHECK_FALSE(torch::equal(mine[0], want[0]));  // rounded: the test can tell
  }
}
