#include "rayless/base/error.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "rayless/base/failure_message.h"
#include "rayless/base/log.h"

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
  // one write() of the whole line (write_whole): mpirun's abort notice, on the same pipe, must not land
  // between "rayless: error: " and the message
  write_whole(STDERR_FILENO, "rayless: error: " + line + "\n");
}

std::string os_reason(int error_number) {
  return error_number == 0 ? std::string("I/O error") : std::string(std::strerror(error_number));
}

}  // namespace rayless
