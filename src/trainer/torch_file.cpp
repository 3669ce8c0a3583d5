#include "rayless/trainer/torch_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "rayless/base/error.h"

namespace rayless {

CheckedFileSink::CheckedFileSink(const std::filesystem::path& path) : path_(path) {
  errno = 0;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ioCheck(fd_ >= 0, "cannot create ", path.string());
}

CheckedFileSink::~CheckedFileSink() {
  if (fd_ >= 0) ::close(fd_);
}

size_t CheckedFileSink::write(const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  size_t left = first_errno_ == 0 && fd_ >= 0 ? size : 0;
  while (left > 0) {
    const ssize_t written = ::write(fd_, bytes, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) {  // 0 bytes for a non-empty write is a failure too; keep the system's reason
      first_errno_ = written < 0 && errno != 0 ? errno : EIO;
      break;
    }
    bytes += written;
    left -= static_cast<size_t>(written);
  }
  return size;
}

void CheckedFileSink::close() {
  if (first_errno_ == 0 && ::fsync(fd_) != 0 && errno != EINVAL) first_errno_ = errno;
  if (::close(fd_) != 0 && first_errno_ == 0) first_errno_ = errno;
  fd_ = -1;
  errno = first_errno_;
  ioCheck(first_errno_ == 0, "cannot write ", path_.string());
}

}  // namespace rayless
