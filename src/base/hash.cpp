#include "rayless/base/hash.h"

#include <cstdio>

namespace rayless {

uint64_t fnv1a64(const void* data, size_t size, uint64_t seed) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::string fnv1a64_hex(const std::string& text) { return hex64(fnv1a64(text.data(), text.size())); }

}  // namespace rayless
