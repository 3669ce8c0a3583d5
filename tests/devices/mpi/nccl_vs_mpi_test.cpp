// The NCCL backend against the MPI backend on the same inputs: allreduce, allgather, broadcast, the
// variable-length padded gather, and the entropy threshold by both methods. Runs where the nccl backend
// is built and every rank has its own CUDA device (NCCL refuses two ranks on one GPU); elsewhere each
// case says why it is skipped and passes.
#include <catch2/catch.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "mpi_test_runtime.h"
#include "rayless/comm/communicator.h"
#include "rayless/grpo/entropy_threshold.h"

using namespace rayless;
using rayless::test::mpi;
using rayless::test::runtime;
using rayless::test::entropies_of;

namespace {

std::unique_ptr<Communicator> nccl_or_skip() {
  if (!find_communicator_backend("nccl")) {
    WARN("the nccl backend is not built here (RAYLESS_CUDA=OFF): skipped");
    return nullptr;
  }
  if (!torch::cuda::is_available() || static_cast<int>(torch::cuda::device_count()) < runtime().local_size()) {
    WARN("fewer CUDA devices than ranks on this node: skipped (NCCL needs one device per rank)");
    return nullptr;
  }
  return make_communicator(runtime(), "nccl", torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(runtime().local_rank())));
}

torch::Device my_device() { return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(runtime().local_rank())); }

}  // namespace

TEST_CASE("nccl vs mpi: allreduce, allgather, broadcast give the MPI backend's results") {
  auto nccl = nccl_or_skip();
  if (!nccl) return;
  auto cpu = mpi();
  const torch::Tensor mine = entropies_of(cpu->rank(), 1000, 1);
  torch::Tensor a = mine.clone(), b = mine.to(my_device());
  cpu->allreduce(a, ReduceOp::Sum);
  nccl->allreduce(b, ReduceOp::Sum);
  CHECK((a - b.cpu()).abs().max().item<double>() <= 1e-5);
  CHECK(torch::equal(cpu->allgather(mine), nccl->allgather(mine.to(my_device())).cpu()));
  torch::Tensor c = mine.clone(), d = mine.to(my_device());
  cpu->broadcast(c, 0);
  nccl->broadcast(d, 0);
  CHECK(torch::equal(c, d.cpu()));
}

TEST_CASE("nccl vs mpi: the variable-length gather (counts, pad, gather, drop) and the entropy threshold") {
  auto nccl = nccl_or_skip();
  if (!nccl) return;
  auto cpu = mpi();
  const int rank = cpu->rank();
  const torch::Tensor mine = entropies_of(rank, 50 + 37 * rank, 2);  // unequal counts per rank
  const auto a = cpu->allgather_variable(mine);
  const auto b = nccl->allgather_variable(mine.to(my_device()));
  REQUIRE(a.size() == b.size());
  for (size_t r = 0; r < a.size(); ++r) CHECK(torch::equal(a[r], b[r].cpu()));
  for (auto method : {EntropyThresholdMethod::Gather, EntropyThresholdMethod::Select}) {
    const float on_cpu = global_entropy_threshold(*cpu, mine, 0.2, method).value;
    const float on_gpu = global_entropy_threshold(*nccl, mine.to(my_device()), 0.2, method).value;
    INFO("method " << choice_name(method));
    CHECK(on_cpu == on_gpu);
  }
}
