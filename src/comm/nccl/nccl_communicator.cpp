// NCCL collectives on CUDA tensors. Only the CUDA runtime API, NCCL and ATen headers are used (the
// c10/cuda stream headers are incomplete in CPU LibTorch builds), so collectives run on the legacy
// default stream, which LibTorch also uses unless a program sets another current stream: ordering
// with the kernels that produced the data is implicit. Each collective is synchronised before it
// returns, inside the watchdog's guard, so a stalled peer is caught like with MPI.
#include "comm/nccl/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>

#include "rayless/base/error.h"
#include "rayless/runtime/runtime.h"
#include "rayless/runtime/watchdog.h"

namespace rayless {

namespace {

void check_nccl(ncclResult_t result, const char* what) {
  runtimeCheck(result == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(result));
}
void check_cuda(cudaError_t result, const char* what) {
  runtimeCheck(result == cudaSuccess, "CUDA ", what, " failed: ", cudaGetErrorString(result));
}

bool nccl_type_for(at::ScalarType dtype, ncclDataType_t& type) {
  switch (dtype) {
    case at::kFloat: type = ncclFloat32; return true;
    case at::kDouble: type = ncclFloat64; return true;
    case at::kHalf: type = ncclFloat16; return true;
    case at::kBFloat16: type = ncclBfloat16; return true;
    case at::kLong: type = ncclInt64; return true;
    case at::kInt: type = ncclInt32; return true;
    case at::kChar: type = ncclInt8; return true;
    case at::kByte: type = ncclUint8; return true;
    case at::kBool: type = ncclUint8; return true;
    default: return false;
  }
}

ncclRedOp_t nccl_op_for(ReduceOp op, at::ScalarType dtype) {
  if (dtype == at::kBool) return op == ReduceOp::Min ? ncclMin : ncclMax;  // sum of flags = any
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, int device_index) : host_(make_mpi_communicator(comm)), device_(device_index) {
    MPI_Comm_dup(comm, &mpi_comm_);  // what split() divides
    rank_ = host_->rank();
    size_ = host_->size();
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id;
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    // the id is host bytes: it travels over MPI, the one channel every rank already shares
    at::Tensor id_bytes = at::empty({static_cast<int64_t>(sizeof id)}, at::kByte);
    if (rank_ == 0) std::memcpy(id_bytes.data_ptr(), &id, sizeof id);
    host_->broadcast(id_bytes, 0);
    std::memcpy(&id, id_bytes.data_ptr(), sizeof id);
    CollectiveGuard guard("ncclCommInitRank");
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "nccl"; }

  void allreduce(at::Tensor& tensor, ReduceOp op) override {
    if (!tensor.is_cuda()) return host_->allreduce(tensor, op);
    ncclDataType_t type;
    runtimeCheck(nccl_type_for(tensor.scalar_type(), type), "allreduce: unsupported dtype ", tensor.scalar_type());
    at::Tensor buffer = tensor.contiguous();
    CollectiveGuard guard("allreduce (nccl)");
    check_nccl(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), type,
                             nccl_op_for(op, tensor.scalar_type()), comm_, stream()),
               "allreduce");
    synchronize();
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }

  void broadcast(at::Tensor& tensor, int root) override {
    if (!tensor.is_cuda()) return host_->broadcast(tensor, root);
    at::Tensor buffer = tensor.contiguous();
    CollectiveGuard guard("broadcast (nccl)");
    check_nccl(ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(), buffer.numel() * buffer.element_size(), ncclUint8,
                             root, comm_, stream()),
               "broadcast");
    synchronize();
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }

  at::Tensor allgather(const at::Tensor& tensor) override {
    if (!tensor.is_cuda()) return host_->allgather(tensor);
    at::Tensor input = tensor.contiguous();
    std::vector<int64_t> shape{size_};
    for (int64_t d : input.sizes()) shape.push_back(d);
    at::Tensor output = at::empty(shape, input.options());
    CollectiveGuard guard("allgather (nccl)");
    // bytes: every dtype moves unchanged
    check_nccl(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel() * input.element_size(), ncclUint8,
                             comm_, stream()),
               "allgather");
    synchronize();
    return output;
  }

  void reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    if (!input.is_cuda()) return host_->reduce_scatter(input, output, op);
    runtimeCheck(output.is_cuda() && input.numel() == output.numel() * size_ &&
                     input.scalar_type() == output.scalar_type(),
                 "reduce_scatter: input has ", input.numel(), " elements, output ", output.numel(), " for ", size_,
                 " ranks (both CUDA, input ranks x output, same dtype)");
    ncclDataType_t type;
    runtimeCheck(nccl_type_for(input.scalar_type(), type), "reduce_scatter: unsupported dtype ", input.scalar_type());
    at::Tensor send = input.contiguous();
    at::Tensor receive = output.is_contiguous() ? output : at::empty_like(output);
    CollectiveGuard guard("reduce_scatter (nccl)");
    check_nccl(ncclReduceScatter(send.data_ptr(), receive.data_ptr(), output.numel(), type,
                                 nccl_op_for(op, input.scalar_type()), comm_, stream()),
               "reduce_scatter");
    synchronize();
    if (!receive.is_same(output)) output.copy_(receive);
  }

  void barrier() override {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    host_->barrier();
  }

  // the MPI ranks split as MPI_Comm_split does; each part gets NCCL communicators of its own
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    {
      CollectiveGuard guard("split");
      runtimeCheck(MPI_Comm_split(mpi_comm_, color < 0 ? MPI_UNDEFINED : color, key, &part) == MPI_SUCCESS,
                   "MPI split failed");
    }
    if (part == MPI_COMM_NULL) return nullptr;
    auto out = std::make_unique<NcclCommunicator>(part, device_);
    MPI_Comm_free(&part);
    return out;
  }

 private:
  static cudaStream_t stream() { return cudaStreamLegacy; }
  void synchronize() { check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

  std::unique_ptr<Communicator> host_;
  MPI_Comm mpi_comm_ = MPI_COMM_NULL;
  int device_ = 0;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device_index) {
  return std::make_unique<NcclCommunicator>(comm, device_index);
}

std::string nccl_version_string() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "unknown";
  // since NCCL 2.9 the code is major * 10000 + minor * 100 + patch
  return str(version / 10000, ".", (version / 100) % 100, ".", version % 100);
}

// Linked in (as objects, see CMakeLists.txt) only when CUDA is on: then distributed.backend = "nccl"
// and "auto" on a CUDA device find it in the registry.
namespace {
const bool registered = register_communicator_backend(
    {"nccl", true,
     [](Runtime& runtime, torch::Device device) { return make_nccl_communicator(runtime.world(), device.index()); },
     nccl_version_string});
}  // namespace

}  // namespace rayless
