// Helpers the rayless-bench commands share (declared in benches.h).
#include "bench/benches.h"

#include "rayless/base/error.h"
#include "rayless/base/files.h"

namespace rayless::cli {

double seconds_since(BenchClock::time_point start) {
  return std::chrono::duration<double>(BenchClock::now() - start).count();
}

nlohmann::json read_json_file(const std::string& file) {
  try {
    return nlohmann::json::parse(read_text_file(file));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(str(file, ": not valid JSON (", e.what(), ")"));
  }
}

}  // namespace rayless::cli
