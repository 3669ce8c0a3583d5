// RAII bfloat16 autocast, the mode train.bf16 runs forward passes and generation in.
#pragma once
#include <ATen/autocast_mode.h>
#include <torch/types.h>

#include "rayless/ops/ops.h"

namespace rayless::ops {

// The dtype a float32 operand of a lowered op (matmul, attention) computes in on `device` now: the
// autocast dtype while autocast is on there, else its own. Other dtypes are left as they are.
inline at::ScalarType autocast_compute_dtype(at::DeviceType device, at::ScalarType dtype) {
  if (dtype == at::kFloat && at::autocast::is_autocast_enabled(device)) return at::autocast::get_autocast_dtype(device);
  return dtype;
}

// bfloat16 autocast on the device's type while alive (train.bf16): forward passes and generation
// compute in bfloat16 where autocast lowers an op, with float32 master weights. Its cast caches (each
// weight cast once, and linear's last input cast) are dropped on exit, as the weights change after it.
class AutocastScope {
 public:
  // dtype: bfloat16 for train.bf16; a recomputation restores the dtype its forward had
  AutocastScope(bool enabled, torch::Device device, at::ScalarType dtype = at::kBFloat16)
      : enabled_(enabled), type_(device.type()) {
    if (!enabled_) return;
    previous_ = at::autocast::is_autocast_enabled(type_);
    previous_dtype_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, dtype);
  }
  ~AutocastScope() {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(type_, previous_);
    at::autocast::set_autocast_dtype(type_, previous_dtype_);
    at::autocast::clear_cache();
    clear_autocast_linear_casts();
    forget_widened_weight();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool previous_ = false;
  at::ScalarType previous_dtype_ = at::kBFloat16;
  at::DeviceType type_;
};

}  // namespace rayless::ops
