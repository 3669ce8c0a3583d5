#include "rayless/base/log.h"

#include <fstream>
#include <iostream>
#include <memory>

namespace rayless {
namespace {
int g_rank = 0;
std::unique_ptr<std::ofstream> g_file;
}  // namespace

void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }

void open_rank_log_file(const std::string& path) {
  g_file = std::make_unique<std::ofstream>(path, std::ios::app);
}

void log_info(const std::string& line) {
  if (g_rank == 0) {
    std::cout << line << std::endl;
  }
  if (g_file) *g_file << line << std::endl;
}

void log_warn(const std::string& line) {
  if (g_rank == 0) std::cerr << "rayless: warning: " << line << std::endl;
  if (g_file) *g_file << "warning: " << line << std::endl;
}

void log_all(const std::string& line) { std::cerr << "[rank " << g_rank << "] " << line << std::endl; }

}  // namespace rayless
