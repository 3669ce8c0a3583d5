// Which backend's table a device uses; see backend.h.
#include "backend.h"

namespace rayless::ops {

const BackendTable& backend_for(const torch::Device& device) {
  static const BackendTable none{"none"};
  switch (device.type()) {
    case torch::kCPU: return cpu_table();
    case torch::kCUDA: return cuda_table();
    default: return none;
  }
}

}  // namespace rayless::ops
