// Collectives and the communicator factory across ranks; runs under
// mpiexec at np = 1..4 (every rank executes every TEST_CASE; the main reduces failures).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include <sched.h>

#include "rayless/comm/communicator.h"
#include "rayless/base/error.h"
#include "mpi_test_runtime.h"
#include "rayless/runtime/runtime.h"

using namespace rayless;
using rayless::test::mpi;
using rayless::test::runtime;
using rayless::test::entropies_of;


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
  // mpiexec may bind each rank to its cores (Open MPI binds to a core at np <= 2): a bound rank takes
  // exactly its cores, an unbound one its share of the node
  const int node_cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  const int bound_cores = CPU_COUNT(&allowed);
  const int expected = std::max(1, bound_cores < node_cores ? bound_cores : node_cores / world_size);
  CHECK(rt.configure_threads(0) == expected);
  CHECK(torch::get_num_threads() == expected);
  CHECK(rt.configure_threads(1) == 1);
  CHECK(rt.select_device(DeviceChoice::Cpu) == torch::Device(torch::kCPU));
  if (!torch::cuda::is_available()) CHECK(rt.select_device(DeviceChoice::Auto) == torch::Device(torch::kCPU));
}

TEST_CASE("factory: auto picks mpi with several ranks, single with one, nccl needs a CUDA build") {
  auto comm = make_communicator(runtime(), "auto", torch::kCPU);
  CHECK(comm->backend_name() == (runtime().size() > 1 ? "mpi" : "single"));
  CHECK(make_communicator(runtime(), "mpi", torch::kCPU)->backend_name() == "mpi");
  if (!find_communicator_backend("nccl")) CHECK_THROWS_AS(make_communicator(runtime(), "nccl", torch::kCPU), InputError);
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

TEST_CASE("split: a color per part, ranks ordered by key, a negative color gets none") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  // rank 0 stays out; the others split by parity, ordered by descending rank
  const int color = rank == 0 ? -1 : rank % 2;
  auto part = comm->split(color, -rank);
  if (rank == 0) {
    CHECK(part == nullptr);
  } else {
    REQUIRE(part != nullptr);
    std::vector<int> members;
    for (int r = size - 1; r >= 1; --r)
      if (r % 2 == color) members.push_back(r);
    CHECK(part->size() == static_cast<int>(members.size()));
    CHECK(part->rank() == static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()));
    CHECK(part->backend_name() == "mpi");
    torch::Tensor sum = torch::tensor({static_cast<double>(rank)}, torch::kFloat64);
    part->allreduce(sum, ReduceOp::Sum);  // only the part's ranks take part
    double expected = 0;
    for (int r : members) expected += r;
    CHECK(sum.item<double>() == expected);
  }
  comm->barrier();  // the parent still works for everyone
  auto single = make_single_communicator();
  CHECK(single->split(-1, 0) == nullptr);
  CHECK(single->split(3, 0)->size() == 1);
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


TEST_CASE("reduce_scatter: rank r gets the reduction of slice r, in every dtype the trainer shards") {
  auto comm = mpi();
  const int rank = comm->rank(), size = comm->size();
  for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    const int64_t slice = 5;
    // rank q contributes (q + 1) * (index + 1) at every index; the sum over ranks is known in closed form
    torch::Tensor input = (torch::arange(size * slice, torch::kFloat64) + 1) * (rank + 1);
    torch::Tensor output = torch::full({slice}, -1.0, dtype);
    comm->reduce_scatter(input.to(dtype), output, ReduceOp::Sum);
    const double rank_sum = size * (size + 1) / 2.0;
    torch::Tensor expected = (torch::arange(rank * slice, (rank + 1) * slice, torch::kFloat64) + 1) * rank_sum;
    CHECK(torch::equal(output.to(torch::kFloat64), expected.to(dtype).to(torch::kFloat64)));
    torch::Tensor maxima = torch::empty({slice}, dtype);
    comm->reduce_scatter(input.to(dtype), maxima, ReduceOp::Max);
    CHECK(torch::equal(maxima.to(torch::kFloat64),
                       ((torch::arange(rank * slice, (rank + 1) * slice, torch::kFloat64) + 1) * size).to(dtype).to(torch::kFloat64)));
  }
  torch::Tensor wrong = torch::empty({3});
  CHECK_THROWS_WITH(comm->reduce_scatter(torch::zeros({size * 4}), wrong, ReduceOp::Sum),
                    Catch::Contains("input must be ranks x output"));
}
