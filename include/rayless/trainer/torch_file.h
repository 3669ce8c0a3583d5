// torch::save into a file, with write errors reported as rayless errors.
//
// torch::save(value, "file") writes through a zip writer that, when a write fails (a full disk), throws
// and then throws again from its destructor while unwinding: std::terminate, a core and no message.
// Here torch writes into a sink that always accepts the bytes; the sink remembers the first failed
// write, stops writing, and the error is raised once torch has finished, as one RuntimeError naming
// the file and the system's reason ("No space left on device"). The bytes are torch's own: torch::load
// reads the file as before.
#pragma once
#include <torch/serialize.h>

#include <cstddef>
#include <filesystem>
#include <string>

namespace rayless {

class CheckedFileSink {
 public:
  explicit CheckedFileSink(const std::filesystem::path& path);  // creates or truncates; throws if it cannot
  ~CheckedFileSink();
  CheckedFileSink(const CheckedFileSink&) = delete;
  CheckedFileSink& operator=(const CheckedFileSink&) = delete;

  // Always returns size, so the writer above never sees a short write; a failure is kept for close().
  size_t write(const void* data, size_t size);
  // fsync + close; throws RuntimeError naming the file if any write, the fsync or the close failed.
  void close();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int first_errno_ = 0;
};

template <typename Value>
void save_torch_file(const Value& value, const std::filesystem::path& path) {
  CheckedFileSink sink(path);
  torch::save(value, [&sink](const void* data, size_t size) { return sink.write(data, size); });
  sink.close();
}

}  // namespace rayless
