// Helpers shared by the rollout tests: per-process scratch directories under the build tree.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

inline std::filesystem::path scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::path(RAYLESS_BINARY_DIR) / "test-scratch" /
                              ("rollout-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::filesystem::path path = scratch_dir() / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

inline std::string worker_script(const std::string& name) {
  return std::string(RAYLESS_TEST_DATA) + "/rollout/workers/" + name;
}
