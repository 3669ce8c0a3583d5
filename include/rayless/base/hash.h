// Small, stable hashes for provenance (config_hash, tokenizer_hash, parameter hashes in tests).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace rayless {

uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);
std::string fnv1a64_hex(const std::string& text);
std::string hex64(uint64_t value);

}  // namespace rayless
