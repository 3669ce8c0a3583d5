// Data-parallel replicas across ranks: bit-identical replicas, the global average gradient, buckets;
// runs under mpiexec at np = 1..4.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"
#include "mpi_test_runtime.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/data_parallel.h"

using namespace rayless;
using rayless::test::mpi;
using rayless::test::runtime;


namespace {
struct SmallNetImpl : torch::nn::Module {
  SmallNetImpl() {
    first = register_module("first", torch::nn::Linear(8, 32));
    second = register_module("second", torch::nn::Linear(32, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return second(torch::tanh(first(x))); }
  torch::nn::Linear first{nullptr}, second{nullptr};
};
TORCH_MODULE(SmallNet);

torch::Tensor batch_of(int rank, int64_t rows) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + rank);
  return torch::randn({rows, 8}, generator);
}
}  // namespace

TEST_CASE("data parallel: replicas stay bit-identical and the average gradient is the global one") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  torch::manual_seed(100 + rank);  // different initial weights on every rank...
  SmallNet net;
  DataParallel dp(*comm, *net, 25);
  dp.broadcast_parameters();  // ...until rank 0's are broadcast
  CHECK(dp.replicas_identical());
  CHECK(dp.num_buckets() == 1);  // 4 small tensors share one bucket
  torch::optim::AdamW optimizer(net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int step = 0; step < 5; ++step) {
    optimizer.zero_grad();
    torch::Tensor x = batch_of(rank * 10 + step, 6);  // every rank has its own data
    torch::Tensor loss = net->forward(x).square().mean();
    loss.backward();
    dp.allreduce_gradients();
    if (step == 0) {
      // second method: the gradient of the mean loss over everyone's data, computed locally
      SmallNet copy;
      {
        torch::NoGradGuard no_grad;
        auto src = net->parameters(), dst = copy->parameters();
        for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      }
      std::vector<torch::Tensor> xs;
      for (int r = 0; r < size; ++r) xs.push_back(batch_of(r * 10 + step, 6));
      copy->forward(torch::cat(xs)).square().mean().backward();
      auto averaged = net->parameters(), global = copy->parameters();
      for (size_t i = 0; i < averaged.size(); ++i)
        CHECK(torch::allclose(averaged[i].grad(), global[i].grad(), 1e-5, 1e-6));
    }
    optimizer.step();
    CHECK(dp.replicas_identical());
  }
  CHECK(dp.gradient_collectives() == (size > 1 ? 5 : 0));
}

TEST_CASE("data parallel: large tensors get buckets of their own, parameters without gradients count as zero") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  // 1 MiB buckets: two 0.75 MiB tensors cannot share one; the small ones can
  std::vector<torch::Tensor> params = {torch::zeros({196608}, torch::requires_grad()),
                                       torch::zeros({196608}, torch::requires_grad()),
                                       torch::zeros({10}, torch::requires_grad()), torch::zeros({10}, torch::requires_grad())};
  DataParallel dp(*comm, params, 1);
  CHECK(dp.num_buckets() == 2);
  params[0].mutable_grad() = torch::full({196608}, static_cast<float>(rank + 1));
  params[1].mutable_grad() = torch::full({196608}, 2.0f);
  if (rank == 0) params[2].mutable_grad() = torch::full({10}, 4.0f * size);  // only rank 0 has it
  params[3].mutable_grad() = torch::full({10}, 1.0f);
  dp.allreduce_gradients();
  CHECK(params[0].grad()[7].item<float>() == Approx((size + 1) / 2.0));
  CHECK(params[1].grad()[0].item<float>() == 2.0f);
  CHECK(params[2].grad()[3].item<float>() == Approx(4.0));
  CHECK(params[3].grad()[9].item<float>() == Approx(1.0));
  CHECK(dp.gradient_collectives() == (size > 1 ? 2 : 0));
}

TEST_CASE("data parallel: bucket size 0 means 4 MiB on MPI, a negative size is an input error") {
  auto comm = mpi();
  // three 1.5 MiB tensors: 4 MiB buckets hold two of them, 25 MiB buckets all three
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 3; ++i) params.push_back(torch::zeros({393216}, torch::requires_grad()));
  CHECK(DataParallel(*comm, params, 0).num_buckets() == 2);
  CHECK(DataParallel(*comm, params, 25).num_buckets() == 1);
  CHECK_THROWS_AS(DataParallel(*comm, params, -1), InputError);
}
