// ZeRO stages 1 and 2 against stage 0 (torch AdamW on replicas): the same weights after several steps
// with gradient accumulation, clipping and weight decay, and checkpoints that move between stages;
// runs under mpiexec at np = 1..4. Float64 throughout: the stages differ only in summation order.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>

#include "mpi_test_runtime.h"
#include "rayless/base/config.h"
#include "rayless/comm/communicator.h"
#include "rayless/trainer/data_parallel.h"
#include "rayless/trainer/optimizer.h"
#include "rayless/trainer/zero_optimizer.h"

using namespace rayless;
using rayless::test::mpi;

namespace {
// 241,602 float64 elements: 1 MiB buckets (131,072 elements) cut through tensors
struct WideNetImpl : torch::nn::Module {
  WideNetImpl() {
    first = register_module("first", torch::nn::Linear(300, 401));
    second = register_module("second", torch::nn::Linear(401, 300));
    scale = register_parameter("scale", torch::ones({301}));
  }
  torch::nn::Linear first{nullptr}, second{nullptr};
  torch::Tensor scale;
};
TORCH_MODULE(WideNet);

WideNet make_net() {
  torch::manual_seed(11);  // the same weights on every rank
  WideNet net;
  net->to(torch::kFloat64);
  return net;
}

OptimConfig optim_config() {
  OptimConfig c;
  c.learning_rate = 1e-2;
  c.weight_decay = 0.1;
  c.max_grad_norm = 0.5;  // the norms below are ~7: clipping is active
  c.warmup_steps = 1;
  return c;
}

// what backward would add on `rank` in micro-step `micro` of step `step`
void add_gradients(WideNet& net, int rank, int step, int micro) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * rank + 10 * step + micro);
  for (auto& p : net->parameters()) {
    torch::Tensor g = torch::randn(p.sizes(), generator, torch::kFloat64) * 0.01;
    if (p.grad().defined())
      p.mutable_grad().add_(g);
    else
      p.mutable_grad() = g;
  }
}

struct Trained {
  WideNet net;
  std::unique_ptr<DataParallel> data_parallel;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<double> grad_norms;
};

Trained start(Communicator& comm, int stage, const OptimConfig& config) {
  Trained t{make_net(), nullptr, nullptr, {}};
  t.data_parallel = std::make_unique<DataParallel>(comm, *t.net, 1);
  t.optimizer = make_optimizer(stage, comm, t.net->parameters(), *t.data_parallel, config, 10, 1);
  return t;
}

void train(Trained& t, int rank, int first_step, int steps) {
  for (int step = first_step; step < first_step + steps; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      add_gradients(t.net, rank, step, micro);
      t.optimizer->after_backward();
    }
    t.grad_norms.push_back(t.optimizer->step(step));
  }
}

double relative_difference(const WideNet& a, const WideNet& b) {
  double worst = 0;
  auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double scale = std::max(pa[i].abs().max().item<double>(), 1e-300);
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>() / scale);
  }
  return worst;
}
}  // namespace

TEST_CASE("zero: the layout covers every element once, slices equal, pieces inside tensors") {
  auto comm = mpi();
  WideNet net = make_net();
  const auto params = net->parameters();
  for (int64_t bucket : {131072, 7, 1000000}) {
    int64_t covered = 0, owned_total = 0;
    ShardLayout layout(params, comm->size(), comm->rank(), bucket);
    CHECK(layout.total_elements() == 241602);
    for (const auto& b : layout.buckets()) {
      CHECK(b.slice * comm->size() >= b.length);
      CHECK((b.slice - 1) * comm->size() < b.length);
      int64_t in_bucket = 0;
      for (const auto& piece : b.pieces) {
        CHECK(piece.parameter_offset + piece.length <= params[piece.parameter].numel());
        CHECK(piece.bucket_offset == in_bucket);  // pieces tile the bucket in order
        in_bucket += piece.length;
      }
      CHECK(in_bucket == b.length);
      covered += in_bucket;
      for (const auto& piece : b.owned) {
        CHECK(piece.bucket_offset + piece.length <= b.slice);
        owned_total += piece.length;
      }
    }
    CHECK(covered == layout.total_elements());
    // every element is owned by exactly one rank
    CHECK(global_sum(*comm, owned_total) == layout.total_elements());
  }
}

TEST_CASE("zero: stages 1 and 2 give stage 0's weights (float64, accumulation, clipping, weight decay)") {
  auto comm = mpi();
  const int rank = comm->rank();
  const OptimConfig config = optim_config();
  Trained stage0 = start(*comm, 0, config), stage1 = start(*comm, 1, config), stage2 = start(*comm, 2, config);
  train(stage0, rank, 0, 3);
  train(stage1, rank, 0, 3);
  train(stage2, rank, 0, 3);
  CHECK(stage0.grad_norms[0] > config.max_grad_norm);  // clipping did something
  CHECK(relative_difference(stage0.net, stage1.net) < 1e-12);
  CHECK(relative_difference(stage0.net, stage2.net) < 1e-12);
  CHECK(relative_difference(stage0.net, make_net()) > 1e-3);  // the weights moved
  for (size_t i = 0; i < stage0.grad_norms.size(); ++i) {
    CHECK(stage1.grad_norms[i] == Approx(stage0.grad_norms[i]).epsilon(1e-12));
    CHECK(stage2.grad_norms[i] == Approx(stage0.grad_norms[i]).epsilon(1e-12));
  }
  CHECK(stage2.data_parallel->replicas_identical());
  // what each rank holds: stage 2 keeps 1/N of the gradients and of the moments
  const OptimizerMemory m0 = stage0.optimizer->memory(), m2 = stage2.optimizer->memory();
  CHECK(m0.optimizer_state == 2 * m0.parameters);
  const auto& layout = static_cast<ZeroOptimizer&>(*stage2.optimizer).layout();
  CHECK(m2.optimizer_state == 2 * layout.shard_elements() * 8);
  CHECK(m2.gradients == layout.shard_elements() * 8);
  const int64_t world = comm->size(), buckets = static_cast<int64_t>(layout.buckets().size());
  CHECK(layout.shard_elements() * world >= layout.total_elements());
  CHECK(layout.shard_elements() * world < layout.total_elements() + world * buckets);  // padding < 1 per rank and bucket
}

TEST_CASE("zero: a checkpoint moves between stages (optimizer.pt is stage 0's format)") {
  auto comm = mpi();
  const int rank = comm->rank();
  const OptimConfig config = optim_config();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rayless-zero-test-np" + std::to_string(comm->size()));
  if (rank == 0) std::filesystem::create_directories(dir);
  for (int saved_stage : {2, 0}) {
    Trained saver = start(*comm, saved_stage, config);
    train(saver, rank, 0, 2);
    saver.optimizer->collect_state();
    if (rank == 0) saver.optimizer->write_state(dir / "optimizer.pt");
    comm->barrier();
    for (int loaded_stage : {0, 1, 2}) {
      Trained loaded = start(*comm, loaded_stage, config);
      {
        torch::NoGradGuard no_grad;
        auto from = saver.net->parameters(), to = loaded.net->parameters();
        for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
      }
      loaded.optimizer->load_state(dir / "optimizer.pt");
      Trained reference = start(*comm, 0, config);  // uninterrupted stage 0
      train(reference, rank, 0, 3);
      train(loaded, rank, 2, 1);
      INFO("saved at stage " << saved_stage << ", loaded at stage " << loaded_stage);
      CHECK(relative_difference(reference.net, loaded.net) < 1e-12);
    }
    comm->barrier();
  }
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("zero: gradients accumulated between steps survive a checkpoint (stage 2 slices)") {
  auto comm = mpi();
  const int rank = comm->rank();
  const OptimConfig config = optim_config();
  Trained through = start(*comm, 2, config), resumed = start(*comm, 2, config);
  train(through, rank, 0, 2);
  train(resumed, rank, 0, 1);
  add_gradients(resumed.net, rank, 1, 0);
  resumed.optimizer->after_backward();
  const std::vector<torch::Tensor> saved = resumed.optimizer->accumulated_gradients();
  Trained fresh = start(*comm, 2, config);
  {
    torch::NoGradGuard no_grad;
    auto from = resumed.net->parameters(), to = fresh.net->parameters();
    for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
  }
  resumed.optimizer->collect_state();
  const auto path = std::filesystem::temp_directory_path() /
                    ("rayless-zero-accum-np" + std::to_string(comm->size()) + ".pt");
  if (rank == 0) resumed.optimizer->write_state(path);
  comm->barrier();
  fresh.optimizer->load_state(path);
  fresh.optimizer->set_accumulated_gradients(saved);
  add_gradients(fresh.net, rank, 1, 1);
  fresh.optimizer->after_backward();
  fresh.optimizer->step(1);
  CHECK(relative_difference(through.net, fresh.net) == 0.0);  // same operations in the same order
  std::vector<torch::Tensor> wrong = saved;
  wrong.pop_back();
  CHECK_THROWS_WITH(fresh.optimizer->set_accumulated_gradients(wrong), Catch::Contains("buckets"));
  comm->barrier();
  if (rank == 0) std::filesystem::remove(path);
}
