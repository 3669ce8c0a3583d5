// The NCCL backend (CUDA tensors); private to src/comm. CPU tensors given to it go through an MPI
// communicator on the same ranks, so host metadata (counts) still travels by MPI.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "rayless/comm/communicator.h"

namespace rayless {

// Collective over the ranks of `comm`: rank 0 creates the ncclUniqueId, MPI_Bcast shares it, every
// rank joins with ncclCommInitRank on CUDA device `device_index`.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device_index);

std::string nccl_version_string();

}  // namespace rayless
