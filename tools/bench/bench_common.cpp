// Helpers the rayless-bench commands share (declared in benches.h).
#include "bench/benches.h"

#include "rayless/base/error.h"
#include "rayless/base/files.h"

#include <sstream>

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

std::vector<int64_t> parse_rows(const std::string& list, const std::string& command) {
  std::vector<int64_t> rows;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    inputCheck(!item.empty() && item.size() < 10 && item.find_first_not_of("0123456789") == std::string::npos &&
                   std::stoll(item) >= 1,
               command, ": --rows must list positive integers, got \"", list, "\"");
    rows.push_back(std::stoll(item));
  }
  inputCheck(!rows.empty(), command, ": --rows must list positive integers, got \"", list, "\"");
  return rows;
}

}  // namespace rayless::cli
