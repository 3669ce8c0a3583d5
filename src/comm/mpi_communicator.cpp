// The MPI backend (CPU tensors, host metadata) and the single-process backend.
#include <torch/types.h>

#include <algorithm>
#include <climits>

#include "rayless/comm/communicator.h"
#include "rayless/base/error.h"
#include "rayless/runtime/watchdog.h"

namespace rayless {

namespace {

// MPI counts are int: larger buffers go in pieces of this many elements
constexpr int64_t kMaxChunk = int64_t{1} << 30;

MPI_Datatype mpi_type_for(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return MPI_FLOAT;
    case torch::kFloat64: return MPI_DOUBLE;
    case torch::kInt64: return MPI_INT64_T;
    case torch::kInt32: return MPI_INT32_T;
    case torch::kInt16: return MPI_INT16_T;
    case torch::kInt8: return MPI_INT8_T;
    case torch::kUInt8: return MPI_UINT8_T;
    case torch::kBool: return MPI_C_BOOL;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op_for(ReduceOp op, torch::ScalarType dtype) {
  if (dtype == torch::kBool) return op == ReduceOp::Min ? MPI_LAND : MPI_LOR;  // sum of flags = any
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_SUM;
}

void check_mpi(int rc, const char* what) { runtimeCheck(rc == MPI_SUCCESS, "MPI ", what, " failed with code ", rc); }

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) {
    MPI_Comm_dup(comm, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }

  void allreduce(torch::Tensor& tensor, ReduceOp op) override {
    check_cpu(tensor, "allreduce");
    if (tensor.scalar_type() == torch::kBFloat16 || tensor.scalar_type() == torch::kHalf) {
      // no MPI type for 16-bit floats: reduce in float32 (as exact or better), round once at the end
      torch::Tensor wide = tensor.to(torch::kFloat32);
      allreduce(wide, op);
      tensor.copy_(wide);
      return;
    }
    MPI_Datatype type = mpi_type_for(tensor.scalar_type());
    runtimeCheck(type != MPI_DATATYPE_NULL, "allreduce: unsupported dtype ", tensor.scalar_type());
    CollectiveGuard guard("allreduce");
    torch::Tensor buffer = tensor.contiguous();
    auto* data = static_cast<char*>(buffer.data_ptr());
    const int64_t element = buffer.element_size();
    for (int64_t start = 0; start < buffer.numel(); start += kMaxChunk) {
      int count = static_cast<int>(std::min(kMaxChunk, buffer.numel() - start));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + start * element, count, type,
                              mpi_op_for(op, tensor.scalar_type()), comm_),
                "allreduce");
    }
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    check_cpu(tensor, "broadcast");
    runtimeCheck(root >= 0 && root < size_, "broadcast: root ", root, " out of range");
    CollectiveGuard guard("broadcast");
    torch::Tensor buffer = tensor.contiguous();
    auto* data = static_cast<char*>(buffer.data_ptr());
    const int64_t bytes = buffer.numel() * buffer.element_size();
    for (int64_t start = 0; start < bytes; start += kMaxChunk) {
      int count = static_cast<int>(std::min(kMaxChunk, bytes - start));
      check_mpi(MPI_Bcast(data + start, count, MPI_BYTE, root, comm_), "broadcast");
    }
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
  }

  torch::Tensor allgather(const torch::Tensor& tensor) override {
    check_cpu(tensor, "allgather");
    CollectiveGuard guard("allgather");
    torch::Tensor input = tensor.contiguous();
    std::vector<int64_t> shape{size_};
    for (int64_t d : input.sizes()) shape.push_back(d);
    torch::Tensor output = torch::empty(shape, input.options());
    runtimeCheck(input.numel() <= INT_MAX, "allgather: ", input.numel(), " elements per rank is too many for one MPI call");
    // elements move as opaque fixed-size records: every dtype (bf16 too) is just bytes here
    MPI_Datatype record;
    MPI_Type_contiguous(static_cast<int>(input.element_size()), MPI_BYTE, &record);
    MPI_Type_commit(&record);
    int rc = MPI_Allgather(input.data_ptr(), static_cast<int>(input.numel()), record, output.data_ptr(),
                           static_cast<int>(input.numel()), record, comm_);
    MPI_Type_free(&record);
    check_mpi(rc, "allgather");
    return output;
  }

  void reduce_scatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp op) override {
    check_cpu(input, "reduce_scatter");
    check_cpu(output, "reduce_scatter");
    runtimeCheck(input.numel() == output.numel() * size_ && input.scalar_type() == output.scalar_type(),
                 "reduce_scatter: input has ", input.numel(), " elements, output ", output.numel(), " for ", size_,
                 " ranks (input must be ranks x output, same dtype)");
    if (input.scalar_type() == torch::kBFloat16 || input.scalar_type() == torch::kHalf) {
      // as allreduce: reduce 16-bit floats in float32, round once
      torch::Tensor wide_out = torch::empty({output.numel()}, output.options().dtype(torch::kFloat32));
      reduce_scatter(input.to(torch::kFloat32), wide_out, op);
      output.view({-1}).copy_(wide_out);
      return;
    }
    MPI_Datatype type = mpi_type_for(input.scalar_type());
    runtimeCheck(type != MPI_DATATYPE_NULL, "reduce_scatter: unsupported dtype ", input.scalar_type());
    runtimeCheck(output.numel() <= INT_MAX, "reduce_scatter: ", output.numel(),
                 " elements per rank is too many for one MPI call");
    CollectiveGuard guard("reduce_scatter");
    torch::Tensor send = input.contiguous();
    torch::Tensor receive = output.is_contiguous() ? output : torch::empty_like(output);
    check_mpi(MPI_Reduce_scatter_block(send.data_ptr(), receive.data_ptr(), static_cast<int>(output.numel()), type,
                                       mpi_op_for(op, input.scalar_type()), comm_),
              "reduce_scatter");
    if (!receive.is_same(output)) output.copy_(receive);
  }

  void barrier() override {
    CollectiveGuard guard("barrier");
    check_mpi(MPI_Barrier(comm_), "barrier");
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    {
      CollectiveGuard guard("split");
      check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &part), "split");
    }
    if (part == MPI_COMM_NULL) return nullptr;
    auto out = make_mpi_communicator(part);  // duplicates it
    MPI_Comm_free(&part);
    return out;
  }

 private:
  static void check_cpu(const torch::Tensor& tensor, const char* what) {
    runtimeCheck(tensor.defined() && tensor.device().is_cpu(), what,
                 ": the MPI backend takes CPU tensors (use the NCCL backend for CUDA tensors)");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void allreduce(torch::Tensor&, ReduceOp) override {}
  void broadcast(torch::Tensor&, int root) override {
    runtimeCheck(root == 0, "broadcast: root ", root, " out of range for one process");
  }
  torch::Tensor allgather(const torch::Tensor& tensor) override { return tensor.unsqueeze(0).clone(); }
  void reduce_scatter(const torch::Tensor& input, torch::Tensor& output, ReduceOp) override {
    runtimeCheck(input.numel() == output.numel(), "reduce_scatter: input has ", input.numel(), " elements, output ",
                 output.numel(), " for 1 rank");
    output.view({-1}).copy_(input.reshape({-1}));
  }
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int) override {
    return color < 0 ? nullptr : make_single_communicator();
  }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) { return std::make_unique<MpiCommunicator>(comm); }
std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

}  // namespace rayless
