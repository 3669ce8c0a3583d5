#include <hdf5.h>
#include <mpi.h>
#include <torch/version.h>

#include <iostream>
#include <string>
#include <vector>

#include "cli/allocator_delays.h"
#include "cli/onednn_cache.h"
#include "cli/options.h"
#include "rayless/comm/communicator.h"
#include "rayless/ops/kernel_plan.h"

namespace rayless::cli {

int version(const Args& args) {
  po::options_description options("rayless version");
  po::variables_map vm;
  if (!parse_options(args, "rayless version", options, vm)) return 0;
  char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(mpi_version, &length);
  std::string mpi(mpi_version, length);
  if (auto comma = mpi.find_first_of(",\n"); comma != std::string::npos) mpi.resize(comma);
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  H5get_libversion(&h5_major, &h5_minor, &h5_release);
  const std::string allocator = running_allocator();
  // bounded by main() unless the user set it
  std::string onednn_cache = onednn_kernel_cache_capacity();
  onednn_cache = onednn_cache.empty() ? "1024 kernels (oneDNN's default)" : onednn_cache + " kernels";
  const CommunicatorBackend* nccl = find_communicator_backend("nccl");
  // the kernel plan: every op (or case of one), what runs it here and why (docs/kernels.md); built
  // first, so that a bad kernel switch is one error line before any output
  const std::vector<std::string> kernels = ops::kernel_plan().describe();
  std::cout << "rayless " << RAYLESS_VERSION << "\n"
            << "libtorch " << TORCH_VERSION << " (CUDA " << (at::hasCUDA() ? "yes" : "no") << ")\n"
            << "nccl " << (nccl ? nccl->library_version() : "not built (configure with -DRAYLESS_CUDA=ON and a CUDA LibTorch)")
            << "\n"
            << "mpi " << mpi << "\n"
            << "hdf5 " << h5_major << "." << h5_minor << "." << h5_release << "\n"
            << "allocator " << allocator << "\n"
            << "onednn kernel cache " << onednn_cache << std::endl;
  for (const std::string& entry : kernels) std::cout << "kernel " << entry << "\n";
  std::cout.flush();
  return 0;
}

}  // namespace rayless::cli
