#include "cli/onednn_cache.h"

#include <cstdlib>

namespace rayless::cli {

std::string onednn_kernel_cache_capacity() {
  for (const char* name : {"ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"})  // oneDNN's order
    if (const char* value = std::getenv(name)) return value;
  return "";
}

void bound_onednn_kernel_cache() {
  if (onednn_kernel_cache_capacity().empty()) setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256", 0);
}

}  // namespace rayless::cli
