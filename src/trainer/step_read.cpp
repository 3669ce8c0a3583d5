#include "rayless/trainer/step_read.h"

#include <atomic>

#include "rayless/base/error.h"

namespace rayless {
namespace {
std::atomic<int64_t> g_reads{0};
}  // namespace

int64_t StepRead::add(const torch::Tensor& values) {
  runtimeCheck(!read_, "StepRead::add after values()");
  const int64_t at = size_;
  parts_.push_back(values.detach().reshape({-1}).to(torch::kFloat64));
  size_ += parts_.back().numel();
  return at;
}

std::vector<double> StepRead::values() {
  runtimeCheck(!read_, "StepRead::values called twice");
  read_ = true;
  ++g_reads;
  // the device's parts in one tensor there, one copy of it
  std::vector<torch::Tensor> on_device;
  for (const torch::Tensor& part : parts_)
    if (!part.is_cpu() && part.numel() > 0) on_device.push_back(part);
  const torch::Tensor copied = on_device.empty() ? torch::Tensor() : torch::cat(on_device).cpu();
  std::vector<double> out;
  out.reserve(static_cast<size_t>(size_));
  int64_t next_copied = 0;
  for (const torch::Tensor& part : parts_) {
    if (part.numel() == 0) continue;
    const torch::Tensor host = part.is_cpu() ? part.contiguous() : copied.narrow(0, next_copied, part.numel());
    if (!part.is_cpu()) next_copied += part.numel();
    const double* v = host.data_ptr<double>();
    out.insert(out.end(), v, v + host.numel());
  }
  return out;
}

int64_t StepRead::reads() { return g_reads.load(); }

}  // namespace rayless
