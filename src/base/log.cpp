#include "rayless/base/log.h"

#include <unistd.h>

#include <cerrno>
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

void write_whole(int fd, const std::string& text) {
  // whatever the iostreams still hold goes first, so lines keep their order
  std::cout.flush();
  std::cerr.flush();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

void log_info(const std::string& line) {
  if (g_rank == 0) write_whole(STDOUT_FILENO, line + "\n");
  if (g_file) *g_file << line << std::endl;
}

void log_warn(const std::string& line) {
  if (g_rank == 0) write_whole(STDERR_FILENO, "rayless: warning: " + line + "\n");
  if (g_file) *g_file << "warning: " << line << std::endl;
}

void log_all(const std::string& line) {
  write_whole(STDERR_FILENO, "[rank " + std::to_string(g_rank) + "] " + line + "\n");
}

}  // namespace rayless
