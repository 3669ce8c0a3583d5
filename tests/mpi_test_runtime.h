// For the Catch2 tests that run under mpiexec (tests/<module>/mpi/): the one Runtime of the test
// process (MPI is initialised and finalised by tests/mpi_catch_main.cpp, not here) and a fresh MPI
// communicator over its world.
#pragma once
#include <memory>

#include "rayless/comm/communicator.h"
#include "rayless/runtime/runtime.h"

namespace rayless::test {

inline Runtime& runtime() {
  static Runtime instance;
  return instance;
}

inline std::unique_ptr<Communicator> mpi() { return make_mpi_communicator(runtime().world()); }

}  // namespace rayless::test
