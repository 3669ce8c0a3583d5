#include "rayless/base/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "rayless/base/error.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {
fs::path temporary_sibling(const fs::path& path) {
  return path.parent_path() / str(".", path.filename().string(), ".tmp.", ::getpid());
}
}  // namespace

void fsync_path(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_file_atomically(const fs::path& path, const std::function<void(const fs::path&)>& write) {
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  const fs::path tmp = temporary_sibling(path);
  try {
    write(tmp);
    fsync_path(tmp);
    fs::rename(tmp, path);
    fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  write_file_atomically(path, [&](const fs::path& tmp) {
    errno = 0;
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    out.flush();
    ioCheck(out.good(), "cannot write ", tmp.string());
  });
}

void write_directory_atomically(const fs::path& path, const std::function<void(const fs::path&)>& fill) {
  runtimeCheck(!fs::exists(path), path.string(), " exists already");
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  const fs::path tmp = temporary_sibling(path);
  std::error_code ignored;
  fs::remove_all(tmp, ignored);
  fs::create_directories(tmp);
  try {
    fill(tmp);
    for (const auto& entry : fs::directory_iterator(tmp)) fsync_path(entry.path());
    fsync_path(tmp);
    fs::rename(tmp, path);
    fsync_path(path.parent_path().empty() ? fs::path(".") : path.parent_path());
  } catch (...) {
    fs::remove_all(tmp, ignored);
    throw;
  }
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  inputCheck(in.good(), path.string(), ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace rayless
