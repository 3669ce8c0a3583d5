// Collectives, the entropy threshold protocols and data-parallel replicas across ranks; runs under
// mpiexec at np = 1..4 (every rank executes every TEST_CASE; the main reduces failures).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "rayless/comm.h"
#include "rayless/data_parallel.h"
#include "rayless/entropy_threshold.h"
#include "rayless/error.h"
#include "rayless/grpo/entropy_mask.h"
#include "rayless/runtime.h"

using namespace rayless;

namespace {

Runtime& runtime() {
  static Runtime instance;  // MPI is already initialised by the test main: no init/finalize here
  return instance;
}

std::unique_ptr<Communicator> mpi() { return make_mpi_communicator(runtime().world()); }

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Rank r's entropies in a test: reproducible on any rank, so each rank can build the concatenation.
torch::Tensor entropies_of(int rank, int64_t count, int64_t salt, bool ties) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * salt + rank);
  torch::Tensor values = torch::rand({count}, generator) * 6;
  if (ties) values = torch::round(values * 4) / 4;
  return values;
}

}  // namespace

TEST_CASE("runtime: ranks, node-local rank and threads") {
  Runtime& rt = runtime();
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  CHECK(rt.rank() == world_rank);
  CHECK(rt.size() == world_size);
  // every rank of a ctest run shares this node
  CHECK(rt.local_size() == world_size);
  CHECK(rt.local_rank() == world_rank);
  const int expected = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world_size);
  CHECK(rt.configure_threads(0) == expected);
  CHECK(torch::get_num_threads() == expected);
  CHECK(rt.configure_threads(1) == 1);
  CHECK(rt.select_device("cpu") == torch::Device(torch::kCPU));
  if (!torch::cuda::is_available()) CHECK(rt.select_device("auto") == torch::Device(torch::kCPU));
}

TEST_CASE("factory: auto picks mpi with several ranks, single with one; nccl needs a CUDA build") {
  auto comm = make_communicator(runtime(), "auto", torch::kCPU);
  CHECK(comm->backend_name() == (runtime().size() > 1 ? "mpi" : "single"));
  CHECK(make_communicator(runtime(), "mpi", torch::kCPU)->backend_name() == "mpi");
  if (!nccl_available()) CHECK_THROWS_AS(make_communicator(runtime(), "nccl", torch::kCPU), InputError);
  CHECK_THROWS_AS(make_communicator(runtime(), "gloo", torch::kCPU), InputError);
}

TEST_CASE("allreduce sum/max/min over the dtypes") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kInt64, torch::kInt32, torch::kUInt8, torch::kBFloat16,
                     torch::kFloat16}) {
    INFO("dtype " << dtype);
    // values 1..8 + rank: sums stay small enough for uint8 and exact in bf16
    torch::Tensor base = torch::arange(1, 9, torch::kFloat64).view({2, 4});
    torch::Tensor sum = (base + rank).to(dtype);
    comm->allreduce(sum, ReduceOp::Sum);
    CHECK(torch::equal(sum.to(torch::kFloat64), base * size + size * (size - 1) / 2.0));
    torch::Tensor max = (base + rank).to(dtype), min = (base + rank).to(dtype);
    comm->allreduce(max, ReduceOp::Max);
    comm->allreduce(min, ReduceOp::Min);
    CHECK(torch::equal(max.to(torch::kFloat64), base + (size - 1)));
    CHECK(torch::equal(min.to(torch::kFloat64), base));
  }
  // a non-contiguous view is reduced in place too
  torch::Tensor matrix = torch::ones({3, 4});
  torch::Tensor column = matrix.select(1, 2);
  comm->allreduce(column, ReduceOp::Sum);
  CHECK(matrix[0][2].item<float>() == static_cast<float>(size));
  CHECK(matrix[0][1].item<float>() == 1.0f);
  torch::Tensor flags = torch::tensor({rank == 0, false});
  comm->allreduce(flags, ReduceOp::Sum);
  CHECK(flags[0].item<bool>());
  CHECK_FALSE(flags[1].item<bool>());
}

TEST_CASE("broadcast and allgather") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  const int root = size - 1;
  torch::Tensor t = torch::full({5}, static_cast<double>(rank), torch::kBFloat16);
  comm->broadcast(t, root);
  CHECK(torch::equal(t, torch::full({5}, static_cast<double>(root), torch::kBFloat16)));
  torch::Tensor mine = torch::full({2, 3}, rank, torch::kInt64);
  torch::Tensor all = comm->allgather(mine);
  REQUIRE(all.sizes() == std::vector<int64_t>{size, 2, 3});
  for (int r = 0; r < size; ++r) CHECK(torch::equal(all[r], torch::full({2, 3}, r, torch::kInt64)));
}

TEST_CASE("allgather_variable with uneven and empty ranks") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  auto rows_of = [](int r) -> int64_t { return r % 2 == 1 ? 0 : r + 2; };  // odd ranks send nothing
  torch::Tensor mine = torch::arange(rows_of(rank) * 3, torch::kFloat32).view({rows_of(rank), 3}) + 100 * rank;
  auto pieces = comm->allgather_variable(mine);
  REQUIRE(pieces.size() == static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    torch::Tensor expected = torch::arange(rows_of(r) * 3, torch::kFloat32).view({rows_of(r), 3}) + 100 * r;
    CHECK(pieces[r].sizes() == expected.sizes());
    CHECK(torch::equal(pieces[r], expected));
  }
  // every rank empty: nothing gathered, shapes kept
  auto none = comm->allgather_variable(torch::empty({0, 3}, torch::kInt32));
  for (const auto& p : none) CHECK(p.sizes() == std::vector<int64_t>{0, 3});
}

TEST_CASE("entropy threshold: gather == select == entropy_quantile of the concatenation") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  struct Layout {
    const char* name;
    std::function<int64_t(int)> count;
    bool ties;
  };
  std::vector<Layout> layouts = {
      {"uneven", [](int r) -> int64_t { return 50 + 37 * r; }, false},
      {"empty ranks", [](int r) -> int64_t { return r % 2 == 0 ? 0 : 120; }, false},  // np 1: nobody has tokens
      {"one token", [](int r) -> int64_t { return r == 0 ? 1 : 0; }, false},
      {"only the last rank", [size](int r) -> int64_t { return r == size - 1 ? 333 : 0; }, true},
      {"ties", [](int r) -> int64_t { return 200 + r; }, true},
  };
  int64_t salt = 0;
  for (const auto& layout : layouts) {
    ++salt;
    torch::Tensor mine = entropies_of(rank, layout.count(rank), salt, layout.ties);
    std::vector<torch::Tensor> everyone;
    for (int r = 0; r < size; ++r) everyone.push_back(entropies_of(r, layout.count(r), salt, layout.ties));
    torch::Tensor all = torch::cat(everyone);
    for (double top : {0.0, 0.2, 0.5, 0.73, 1.0}) {
      INFO(layout.name << ", top_entropy_quantile " << top);
      const float by_gather = global_entropy_threshold(*comm, mine, top, "gather");
      const float by_select = global_entropy_threshold(*comm, mine, top, "select");
      if (all.numel() == 0) {
        CHECK(std::isinf(by_gather));
        CHECK(std::isinf(by_select));
        continue;
      }
      const float expected = entropy_quantile(all, 1.0 - top);
      CHECK(bits_of(by_gather) == bits_of(expected));
      CHECK(bits_of(by_select) == bits_of(expected));
      // and torch.quantile itself (fine below its 16M-element limit)
      CHECK(bits_of(by_gather) == bits_of(torch::quantile(all, 1.0 - top).item<float>()));
    }
  }
}

// Registered separately at np 2 (tests/comm/tests.cmake): more tokens than torch.quantile accepts.
TEST_CASE("entropy threshold beyond 16,777,216 tokens", "[.][big]") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  const int64_t total = (int64_t{1} << 24) + 1001;
  auto count_of = [&](int r) { return total / size + (r < total % size ? 1 : 0); };
  torch::Tensor mine = entropies_of(rank, count_of(rank), 77, false);
  for (double top : {0.2, 0.9}) {
    const float by_gather = global_entropy_threshold(*comm, mine, top, "gather");
    const float by_select = global_entropy_threshold(*comm, mine, top, "select");
    CHECK(bits_of(by_gather) == bits_of(by_select));
    if (rank == 0) {
      std::vector<torch::Tensor> everyone;
      for (int r = 0; r < size; ++r) everyone.push_back(entropies_of(r, count_of(r), 77, false));
      CHECK(bits_of(by_gather) == bits_of(entropy_quantile(torch::cat(everyone), 1.0 - top)));
    }
  }
}

TEST_CASE("global_mean_std equals torch.std of the concatenation") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  torch::Tensor mine = entropies_of(rank, rank == 1 ? 0 : 10 + rank, 9, false).to(torch::kFloat64);
  std::vector<torch::Tensor> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(entropies_of(r, r == 1 ? 0 : 10 + r, 9, false).to(torch::kFloat64));
  torch::Tensor all = torch::cat(everyone);
  MeanStd stats = global_mean_std(*comm, mine);
  CHECK(stats.count == all.numel());
  CHECK(stats.mean == Approx(all.mean().item<double>()).epsilon(1e-12));
  CHECK(stats.std == Approx(all.std().item<double>()).epsilon(1e-12));
  CHECK(global_sum(*comm, int64_t{rank}) == int64_t{size} * (size - 1) / 2);
  CHECK(global_max(*comm, static_cast<double>(rank)) == size - 1);
  CHECK(global_min(*comm, static_cast<double>(rank)) == 0);
}

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

TEST_CASE("data parallel: bucket size 0 means 4 MiB on MPI; a negative size is an input error") {
  auto comm = mpi();
  // three 1.5 MiB tensors: 4 MiB buckets hold two of them, 25 MiB buckets all three
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 3; ++i) params.push_back(torch::zeros({393216}, torch::requires_grad()));
  CHECK(DataParallel(*comm, params, 0).num_buckets() == 2);
  CHECK(DataParallel(*comm, params, 25).num_buckets() == 1);
  CHECK_THROWS_AS(DataParallel(*comm, params, -1), InputError);
}
