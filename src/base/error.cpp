#include "rayless/base/error.h"

#include <cstring>
#include <iostream>

namespace rayless {

int exit_code_for(const std::exception& error) {
  if (dynamic_cast<const InputError*>(&error) != nullptr) return kExitInput;
  return kExitRuntime;
}

void print_error(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::cerr << "rayless: error: " << line << std::endl;
}

std::string os_reason(int error_number) {
  return error_number == 0 ? std::string("I/O error") : std::string(std::strerror(error_number));
}

}  // namespace rayless
