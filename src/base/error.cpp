#include "rayless/base/error.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "rayless/base/failure_message.h"

namespace rayless {

int exit_code_for(const std::exception& error) {
  if (dynamic_cast<const InputError*>(&error) != nullptr) return kExitInput;
  if (dynamic_cast<const NonfiniteError*>(&error) != nullptr) return kExitNonfinite;
  if (is_out_of_memory(error)) return kExitOutOfMemory;
  return kExitRuntime;
}

void print_error(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // One write() of the whole line: std::cerr is unbuffered, so each << would be a write of its own,
  // and mpirun's abort notice (on the same pipe) could land between "rayless: error: " and the message.
  // A write of up to PIPE_BUF bytes to a pipe is atomic; longer ones are finished in the loop.
  std::cerr.flush();
  const std::string out = "rayless: error: " + line + "\n";
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(STDERR_FILENO, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

std::string os_reason(int error_number) {
  return error_number == 0 ? std::string("I/O error") : std::string(std::strerror(error_number));
}

}  // namespace rayless
