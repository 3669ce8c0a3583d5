#include "rayless/trainer/data_parallel.h"

#include <torch/types.h>

#include <map>

#include "rayless/comm/communicator.h"
#include "rayless/base/error.h"
#include "rayless/base/hash.h"

namespace rayless {

DataParallel::DataParallel(Communicator& comm, std::vector<torch::Tensor> parameters, int64_t bucket_size_mb,
                           std::vector<torch::Tensor> buffers)
    : comm_(comm), parameters_(std::move(parameters)), buffers_(std::move(buffers)) {
  inputCheck(bucket_size_mb >= 0, "distributed.bucket_size_mb must be at least 0, got ", bucket_size_mb);
  if (bucket_size_mb == 0) bucket_size_mb = comm.backend_name() == "nccl" ? 25 : 4;
  build_buckets(bucket_size_mb * 1024 * 1024);
}

DataParallel::DataParallel(Communicator& comm, torch::nn::Module& module, int64_t bucket_size_mb)
    : DataParallel(comm, module.parameters(), bucket_size_mb, module.buffers()) {}

void DataParallel::build_buckets(int64_t bucket_bytes) {
  // consecutive parameters of the same dtype and device share a bucket until it is full
  Bucket current;
  torch::ScalarType dtype = torch::kFloat32;
  torch::Device device = torch::kCPU;
  int64_t bytes = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const torch::Tensor& p = parameters_[i];
    const int64_t p_bytes = p.numel() * p.element_size();
    bool same_kind = current.members.empty() || (p.scalar_type() == dtype && p.device() == device);
    if (!current.members.empty() && (!same_kind || bytes + p_bytes > bucket_bytes)) {
      buckets_.push_back(std::move(current));
      current = Bucket();
      bytes = 0;
    }
    dtype = p.scalar_type();
    device = p.device();
    current.members.push_back(i);
    current.numel += p.numel();
    bytes += p_bytes;
  }
  if (!current.members.empty()) buckets_.push_back(std::move(current));
}

void DataParallel::broadcast_flat(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root) {
  if (comm.size() == 1) return;
  torch::NoGradGuard no_grad;
  // group by dtype/device so each group travels as one flat tensor
  std::map<std::pair<int, std::string>, std::vector<torch::Tensor>> groups;
  for (const auto& t : tensors) groups[{static_cast<int>(t.scalar_type()), t.device().str()}].push_back(t);
  for (auto& [kind, members] : groups) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& t : members) flat_parts.push_back(t.detach().reshape({-1}));
    torch::Tensor flat = torch::cat(flat_parts);
    comm.broadcast(flat, root);
    int64_t offset = 0;
    for (auto& t : members) {
      t.detach().copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
}

void DataParallel::broadcast_parameters(int root) {
  broadcast_flat(comm_, parameters_, root);
  if (!buffers_.empty()) broadcast_flat(comm_, buffers_, root);
}

void DataParallel::allreduce_gradients() {
  if (comm_.size() == 1) return;
  torch::NoGradGuard no_grad;
  const double world = comm_.size();
  for (const Bucket& bucket : buckets_) {
    std::vector<torch::Tensor> parts;
    for (size_t i : bucket.members) {
      torch::Tensor& p = parameters_[i];
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      parts.push_back(p.grad().reshape({-1}));
    }
    torch::Tensor flat = torch::cat(parts);
    flat.div_(world);  // as DDP: divide first, then sum
    comm_.allreduce(flat, ReduceOp::Sum);
    ++gradient_collectives_;
    int64_t offset = 0;
    for (size_t i : bucket.members) {
      torch::Tensor grad = parameters_[i].grad();
      grad.copy_(flat.narrow(0, offset, grad.numel()).view(grad.sizes()));
      offset += grad.numel();
    }
  }
}

uint64_t DataParallel::parameter_hash() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& p : parameters_) {
    torch::Tensor host = p.detach().to(torch::kCPU).contiguous();
    hash = fnv1a64(host.data_ptr(), host.numel() * host.element_size(), hash);
  }
  return hash;
}

bool DataParallel::replicas_identical() {
  torch::Tensor local = torch::tensor({static_cast<int64_t>(parameter_hash())}, torch::kInt64);
  torch::Tensor all = comm_.allgather(local).view({-1});
  return (all == all[0]).all().item<bool>();
}

}  // namespace rayless
