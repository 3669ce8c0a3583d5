#include "rayless/trainer/weight_sync.h"

#include "rayless/comm/communicator.h"

namespace rayless {

int64_t broadcast_weights(Communicator& comm, const std::vector<torch::Tensor>& tensors, int root,
                          std::optional<torch::Dtype> wire_dtype, int64_t bucket_bytes) {
  if (comm.size() == 1 || tensors.empty()) return 0;
  torch::NoGradGuard no_grad;
  const bool sending = comm.rank() == root;
  int64_t moved = 0;
  size_t begin = 0;
  while (begin < tensors.size()) {
    // consecutive tensors of one dtype and device, up to bucket_bytes (a larger tensor goes alone)
    const torch::Tensor& head = tensors[begin];
    size_t end = begin;
    int64_t bytes = 0, numel = 0;
    while (end < tensors.size() && tensors[end].scalar_type() == head.scalar_type() &&
           tensors[end].device() == head.device() &&
           (end == begin || bytes + tensors[end].numel() * tensors[end].element_size() <= bucket_bytes)) {
      bytes += tensors[end].numel() * tensors[end].element_size();
      numel += tensors[end].numel();
      ++end;
    }
    const torch::Dtype wire = wire_dtype.value_or(head.scalar_type());
    torch::Tensor flat;
    if (sending) {
      std::vector<torch::Tensor> parts;
      for (size_t i = begin; i < end; ++i) parts.push_back(tensors[i].detach().reshape({-1}));
      flat = torch::cat(parts).to(wire);
    } else {
      flat = torch::empty({numel}, head.options().dtype(wire));
    }
    comm.broadcast(flat, root);
    moved += flat.numel() * flat.element_size();
    if (!sending) {
      int64_t offset = 0;
      for (size_t i = begin; i < end; ++i) {
        torch::Tensor t = tensors[i].detach();
        t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));  // rounds back from bfloat16 when it travelled so
        offset += t.numel();
      }
    }
    begin = end;
  }
  return moved;
}

}  // namespace rayless
