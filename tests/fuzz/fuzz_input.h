// Shared by the fuzz targets (tests/fuzz/targets/*.cpp): the readers under test take paths, so the
// input is written to a file in a private directory of this process; and the one rule every target
// checks: an input either parses or is refused with rayless::InputError (exit 2 in the program).
// Anything else that escapes (another exception type, a crash, a sanitizer report) is a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "rayless/base/error.h"

namespace rayless::fuzz {

// A directory of this process's own, removed at exit.
inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "rayless-fuzz-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) std::abort();
    static std::string to_remove = pattern;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(to_remove, ignored);
    });
    return std::filesystem::path(pattern);
  }();
  return dir;
}

// Writes the bytes to work_dir()/relative (directories created) and returns the path.
inline std::filesystem::path write_input(const std::string& relative, const uint8_t* data, size_t size) {
  const std::filesystem::path path = work_dir() / relative;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();  // the harness itself failed: not a finding about the reader
  return path;
}

// Runs the reader; InputError is the expected refusal of bad bytes.
template <typename Reader>
int parse_or_refuse(Reader&& reader) {
  try {
    reader();
  } catch (const rayless::InputError&) {
  }
  return 0;
}

}  // namespace rayless::fuzz
