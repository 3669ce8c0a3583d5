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

// Rows of a left-padded [B, P] batch without their padding (the golden fixtures' prompts).
inline std::vector<std::vector<int64_t>> unpadded_rows(const torch::Tensor& ids, const torch::Tensor& mask) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < ids.size(0); ++r) {
    std::vector<int64_t> row;
    for (int64_t c = 0; c < ids.size(1); ++c)
      if (mask[r][c].item<int64_t>()) row.push_back(ids[r][c].item<int64_t>());
    rows.push_back(row);
  }
  return rows;
}

// transformers' RMSNorm (Qwen2RMSNorm) written out: widened to float32, the normalised value rounded
// to x's dtype, then times the weight
inline torch::Tensor transformers_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto h = x.to(torch::kFloat32);
  return weight * (h * torch::rsqrt(h.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
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
