// Single-process checks of the threshold methods (the MPI tests repeat them across ranks).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "rayless/comm/communicator.h"
#include "rayless/grpo/entropy_threshold.h"
#include "rayless/base/error.h"
#include "rayless/grpo/entropy_mask.h"

using namespace rayless;

namespace {
uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
}  // namespace

TEST_CASE("gather and select equal entropy_quantile in one process") {
  auto comm = make_single_communicator();
  torch::manual_seed(3);
  std::vector<torch::Tensor> cases = {
      torch::rand({1000}) * 5,
      torch::tensor({1.5f}),
      torch::tensor({2.0f, 2.0f, 2.0f, 1.0f}),                                      // ties
      torch::round(torch::rand({777}) * 8) / 8,                                      // many ties
      torch::tensor({0.0f, 1e-40f, 3e-38f, 1.0f, std::numeric_limits<float>::infinity(), -2.0f, -1e-39f}),  // denormals, inf, negatives
      torch::randn({4097}) * 1e6,
  };
  for (const auto& values : cases) {
    for (double top : {0.0, 0.01, 0.2, 0.5, 0.8, 0.9999, 1.0}) {
      const float expected = entropy_quantile(values, 1.0 - top);
      const float by_gather = global_entropy_threshold(*comm, values, top, EntropyThresholdMethod::Gather).value;
      const float by_select = global_entropy_threshold(*comm, values, top, EntropyThresholdMethod::Select).value;
      INFO("n = " << values.numel() << " top = " << top);
      CHECK(bits_of(by_gather) == bits_of(expected));
      CHECK(bits_of(by_select) == bits_of(expected));
    }
  }
}

TEST_CASE("no tokens anywhere gives +infinity, so the mask is all false") {
  auto comm = make_single_communicator();
  torch::Tensor none = torch::empty({0}, torch::kFloat32);
  CHECK(std::isinf(global_entropy_threshold(*comm, none, 0.2, EntropyThresholdMethod::Gather).value));
  CHECK(std::isinf(global_entropy_threshold(*comm, none, 0.2, EntropyThresholdMethod::Select).value));
}

TEST_CASE("NaN in, NaN out, like torch.quantile") {
  auto comm = make_single_communicator();
  torch::Tensor values = torch::tensor({1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f});
  CHECK(std::isnan(global_entropy_threshold(*comm, values, 0.5, EntropyThresholdMethod::Gather).value));
  CHECK(std::isnan(global_entropy_threshold(*comm, values, 0.5, EntropyThresholdMethod::Select).value));
}

TEST_CASE("bad method, quantile or dtype is refused") {
  auto comm = make_single_communicator();
  torch::Tensor values = torch::rand({4});
  CHECK_THROWS_WITH(parse_choice<EntropyThresholdMethod>("sort", "grpo.entropy_threshold_method"),
                    Catch::Contains("gather | select"));
  CHECK_THROWS_AS(global_entropy_threshold(*comm, values, 1.5, EntropyThresholdMethod::Gather).value, InputError);
  CHECK_THROWS_AS(global_entropy_threshold(*comm, values.to(torch::kFloat64), 0.2, EntropyThresholdMethod::Gather).value, RuntimeError);
}

TEST_CASE("select moves a fixed number of bytes, gather grows with the tokens") {
  auto comm = make_single_communicator();
  const int64_t select_small = global_entropy_threshold(*comm, torch::rand({100}), 0.2, EntropyThresholdMethod::Select).bytes;
  const int64_t select_large = global_entropy_threshold(*comm, torch::rand({100000}), 0.2, EntropyThresholdMethod::Select).bytes;
  CHECK(select_large <= 2 * (257 + 3 * 512) * 8);
  CHECK(select_small <= 2 * (257 + 3 * 512) * 8);
  CHECK(global_entropy_threshold(*comm, torch::rand({100000}), 0.2, EntropyThresholdMethod::Gather).bytes >= 100000 * 4);
}

TEST_CASE("single communicator semantics") {
  auto comm = make_single_communicator();
  CHECK(comm->size() == 1);
  CHECK(comm->backend_name() == "single");
  torch::Tensor t = torch::arange(6).view({2, 3});
  comm->allreduce(t, ReduceOp::Sum);
  CHECK(torch::equal(t, torch::arange(6).view({2, 3})));
  CHECK(comm->allgather(t).sizes() == std::vector<int64_t>{1, 2, 3});
  auto pieces = comm->allgather_variable(torch::empty({0, 3}));
  REQUIRE(pieces.size() == 1u);
  CHECK(pieces[0].sizes() == std::vector<int64_t>{0, 3});
  auto stats = global_mean_std(*comm, torch::tensor({1.0, 2.0, 4.0}));
  CHECK(stats.mean == Approx(7.0 / 3));
  CHECK(stats.std == Approx(torch::tensor({1.0, 2.0, 4.0}).std().item<double>()));
}
