// For the Catch2 tests that run under mpiexec (tests/<module>/mpi/): the one Runtime of the test
// process (MPI is initialised and finalised by tests/mpi_catch_main.cpp, not here), a fresh MPI
// communicator over its world, and reproducible per-rank inputs.
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <memory>

#include "rayless/comm/communicator.h"
#include "rayless/runtime/runtime.h"

namespace rayless::test {

inline Runtime& runtime() {
  static Runtime instance;
  return instance;
}

inline std::unique_ptr<Communicator> mpi() { return make_mpi_communicator(runtime().world()); }

// Rank r's values in [0, 6) (entropy-like; `ties`: rounded to quarters): the same on any rank, so each
// rank can build the concatenation of all ranks' inputs.
inline torch::Tensor entropies_of(int rank, int64_t count, int64_t salt, bool ties = false) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * salt + rank);
  torch::Tensor values = torch::rand({count}, generator) * 6;
  if (ties) values = torch::round(values * 4) / 4;
  return values;
}

}  // namespace rayless::test
