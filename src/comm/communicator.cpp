// make_communicator: picks the backend for a device.
#include "rayless/comm.h"
#include "rayless/error.h"
#include "rayless/runtime.h"

#ifdef RAYLESS_WITH_CUDA
#include "comm/nccl/nccl_communicator.h"
#endif

namespace rayless {

bool nccl_available() {
#ifdef RAYLESS_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_communicator(Runtime& runtime, const std::string& backend, torch::Device device) {
  inputCheck(backend == "auto" || backend == "mpi" || backend == "nccl" || backend == "single",
             "distributed.backend: unknown backend \"", backend, "\" (auto | mpi | nccl)");
  if (backend == "nccl" || (backend == "auto" && device.is_cuda() && nccl_available())) {
    inputCheck(nccl_available(), "distributed.backend = \"nccl\" but this build has no NCCL backend "
               "(configure against a CUDA LibTorch with -DRAYLESS_CUDA=ON)");
    inputCheck(device.is_cuda(), "distributed.backend = \"nccl\" needs model.device = cuda (the device is ", device.str(), ")");
#ifdef RAYLESS_WITH_CUDA
    return make_nccl_communicator(runtime.world(), device.index());
#endif
  }
  inputCheck(!device.is_cuda() || backend == "single" || (backend == "auto" && runtime.size() == 1),
             "distributed.backend = \"", backend, "\" with CUDA tensors needs the NCCL backend (use auto or nccl)");
  if (backend == "single") {
    inputCheck(runtime.size() == 1, "distributed.backend = \"single\" but ", runtime.size(), " ranks are running");
    return make_single_communicator();
  }
  if (backend == "auto" && runtime.size() == 1) return make_single_communicator();
  return make_mpi_communicator(runtime.world());
}

}  // namespace rayless
