#include <torch/types.h>

#include <cmath>
#include <limits>

#include "rayless/comm/communicator.h"

namespace rayless {

namespace {
template <typename T>
T reduce_scalar(Communicator& comm, T local, ReduceOp op, torch::ScalarType dtype) {
  torch::Tensor t = torch::full({1}, local, torch::TensorOptions().dtype(dtype));
  comm.allreduce(t, op);
  return t.item<T>();
}
}  // namespace

double global_sum(Communicator& comm, double local) { return reduce_scalar(comm, local, ReduceOp::Sum, torch::kFloat64); }
int64_t global_sum(Communicator& comm, int64_t local) { return reduce_scalar(comm, local, ReduceOp::Sum, torch::kInt64); }
double global_max(Communicator& comm, double local) { return reduce_scalar(comm, local, ReduceOp::Max, torch::kFloat64); }
double global_min(Communicator& comm, double local) { return reduce_scalar(comm, local, ReduceOp::Min, torch::kFloat64); }

torch::Tensor global_sum(Communicator& comm, const torch::Tensor& local) {
  torch::Tensor copy = local.detach().clone();
  comm.allreduce(copy, ReduceOp::Sum);
  return copy;
}

MeanStd global_mean_std(Communicator& comm, const torch::Tensor& local, bool unbiased) {
  torch::Tensor values = local.detach().to(torch::kCPU, torch::kFloat64).reshape({-1});
  torch::Tensor count_and_sum = torch::tensor({static_cast<double>(values.numel()), values.sum().item<double>()}, torch::kFloat64);
  comm.allreduce(count_and_sum, ReduceOp::Sum);
  MeanStd result;
  result.count = static_cast<int64_t>(count_and_sum[0].item<double>());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  result.mean = result.count > 0 ? count_and_sum[1].item<double>() / result.count : nan;
  // second pass around the global mean: no cancellation from sum-of-squares
  torch::Tensor squares = torch::full({1}, result.count > 0 ? (values - result.mean).square().sum().item<double>() : 0.0,
                                      torch::kFloat64);
  comm.allreduce(squares, ReduceOp::Sum);
  const int64_t dof = result.count - (unbiased ? 1 : 0);
  result.std = dof > 0 ? std::sqrt(squares.item<double>() / dof) : nan;
  return result;
}

}  // namespace rayless
