// The backend registry, make_communicator, and the one variable-length gather every backend shares.
#include "rayless/comm/communicator.h"

#include <algorithm>

#include "rayless/base/error.h"
#include "rayless/runtime/runtime.h"

namespace rayless {

namespace {
std::vector<CommunicatorBackend>& registry() {
  static std::vector<CommunicatorBackend> backends = {
      {"mpi", false, [](Runtime& runtime, torch::Device) { return make_mpi_communicator(runtime.world()); }, {}}};
  return backends;
}
}  // namespace

bool register_communicator_backend(CommunicatorBackend backend) {
  registry().push_back(std::move(backend));
  return true;
}

const CommunicatorBackend* find_communicator_backend(const std::string& name) {
  for (const auto& b : registry())
    if (b.name == name) return &b;
  return nullptr;
}

std::unique_ptr<Communicator> make_communicator(Runtime& runtime, const std::string& backend, torch::Device device) {
  const CommunicatorBackend* chosen = nullptr;
  if (backend == "auto") {
    if (device.is_cuda())
      for (const auto& b : registry())
        if (b.serves_cuda && !chosen) chosen = &b;
    if (!chosen) {
      inputCheck(!device.is_cuda() || runtime.size() == 1, "distributed.backend = \"auto\" with CUDA tensors on ",
                 runtime.size(), " ranks needs a CUDA backend, and this build has none (configure against a CUDA "
                 "LibTorch with -DRAYLESS_CUDA=ON)");
      if (runtime.size() == 1) return make_single_communicator();
      chosen = find_communicator_backend("mpi");
    }
  } else {
    chosen = find_communicator_backend(backend);
    inputCheck(chosen != nullptr, "distributed.backend = \"", backend, "\" but this build has no such backend",
               backend == "nccl" ? " (configure against a CUDA LibTorch with -DRAYLESS_CUDA=ON)" : "");
    inputCheck(chosen->serves_cuda == device.is_cuda(), "distributed.backend = \"", backend, "\" cannot serve ",
               device.is_cuda() ? "CUDA" : "CPU", " tensors (model.device is ", device.str(), "): use auto");
  }
  return chosen->make(runtime, device);
}

torch::Tensor Communicator::in_collective_memory(const torch::Tensor& tensor) const {
  return backend_name() == "mpi" ? tensor.cpu() : tensor;
}

std::vector<torch::Tensor> Communicator::allgather_variable(const torch::Tensor& tensor) {
  runtimeCheck(tensor.dim() >= 1, "allgather_variable: needs a tensor with at least one dimension");
  int64_t row_numel = 1;
  for (int64_t d = 1; d < tensor.dim(); ++d) row_numel *= tensor.size(d);
  const torch::Tensor all_meta = allgather(torch::tensor({tensor.size(0), row_numel}, torch::kInt64));  // [size, 2]
  auto meta = all_meta.accessor<int64_t, 2>();
  int64_t max_rows = 0;
  for (int r = 0; r < size(); ++r) {
    max_rows = std::max(max_rows, meta[r][0]);
    runtimeCheck(meta[r][1] == row_numel, "allgather_variable: rank ", r, " has ", meta[r][1],
                 " elements per row, this rank ", row_numel, " (all dimensions but the first must agree)");
  }
  std::vector<int64_t> shape(tensor.sizes().begin(), tensor.sizes().end());
  std::vector<torch::Tensor> result;
  if (max_rows == 0) {
    for (int r = 0; r < size(); ++r) result.push_back(torch::empty(shape, tensor.options()));
    return result;
  }
  shape[0] = max_rows;
  torch::Tensor padded = torch::zeros(shape, tensor.options());
  if (tensor.size(0) > 0) padded.narrow(0, 0, tensor.size(0)).copy_(tensor);
  const torch::Tensor gathered = allgather(padded);
  for (int r = 0; r < size(); ++r) result.push_back(gathered[r].narrow(0, 0, meta[r][0]));
  return result;
}

}  // namespace rayless
