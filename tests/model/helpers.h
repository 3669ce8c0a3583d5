// Shared helpers for the model tests: golden fixture paths and JSON/tensor readers.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "rayless/base/files.h"

namespace rayless::test {

inline std::filesystem::path golden_dir() { return std::filesystem::path(RAYLESS_TEST_DATA) / "hf-golden"; }

inline nlohmann::json read_json(const std::filesystem::path& file) { return nlohmann::json::parse(read_text_file(file)); }

// ||a - exact|| / ||exact||, in float64: a norm, not the largest difference, which one rounding of the
// largest element decides
inline double relative_l2_error(const torch::Tensor& a, const torch::Tensor& exact) {
  return (a.to(torch::kFloat64) - exact).norm().item<double>() / exact.norm().item<double>();
}

inline torch::Tensor ids_tensor(const nlohmann::json& rows) {
  std::vector<torch::Tensor> out;
  for (const auto& r : rows) out.push_back(torch::tensor(r.get<std::vector<int64_t>>(), torch::kLong));
  return torch::stack(out);
}

// A fresh empty directory under the build tree for one test.
inline std::filesystem::path scratch_dir(const std::string& name) {
  auto dir = std::filesystem::path(RAYLESS_BINARY_DIR) / "test-scratch" / "model" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_bytes(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace rayless::test
