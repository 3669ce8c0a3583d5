// The global entropy threshold across ranks: both protocols against the quantile of the
// concatenation; runs under mpiexec at np = 1..4 (every rank executes every TEST_CASE).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"
#include "mpi_test_runtime.h"
#include "rayless/runtime/runtime.h"
#include "rayless/grpo/entropy_mask.h"
#include "rayless/grpo/entropy_threshold.h"

using namespace rayless;
using rayless::test::mpi;
using rayless::test::runtime;
using rayless::test::entropies_of;

namespace {


uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}


}  // namespace

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
      const float by_gather = global_entropy_threshold(*comm, mine, top, EntropyThresholdMethod::Gather).value;
      const float by_select = global_entropy_threshold(*comm, mine, top, EntropyThresholdMethod::Select).value;
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
    const float by_gather = global_entropy_threshold(*comm, mine, top, EntropyThresholdMethod::Gather).value;
    const float by_select = global_entropy_threshold(*comm, mine, top, EntropyThresholdMethod::Select).value;
    CHECK(bits_of(by_gather) == bits_of(by_select));
    if (rank == 0) {
      std::vector<torch::Tensor> everyone;
      for (int r = 0; r < size; ++r) everyone.push_back(entropies_of(r, count_of(r), 77, false));
      CHECK(bits_of(by_gather) == bits_of(entropy_quantile(torch::cat(everyone), 1.0 - top)));
    }
  }
}

