#include "rayless/metrics.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "rayless/error.h"
#include "rayless/files.h"

namespace fs = std::filesystem;

namespace rayless {

MetricsLog::MetricsLog(const fs::path& path, int64_t resume_step) {
  if (resume_step >= 0 && fs::exists(path)) {
    std::istringstream old(read_text_file(path));
    std::string kept, line;
    while (std::getline(old, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() > resume_step) continue;
      kept += line + "\n";
    }
    write_text_atomically(path, kept);
  }
  out_.open(path, std::ios::app);
  runtimeCheck(out_.good(), "cannot open ", path.string(), " for writing");
}

void MetricsLog::write(int64_t step, const StepMetrics& metrics) {
  nlohmann::json line;
  line["step"] = step;
  for (const auto& [name, value] : metrics) {
    if (std::isfinite(value))
      line[name] = value;
    else
      line[name] = nullptr;  // JSON has no NaN
  }
  out_ << line.dump() << "\n";
  out_.flush();
}

namespace {
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << "h" << (s % 3600) / 60 << "m";
  else if (s >= 60) out << s / 60 << "m" << s % 60 << "s";
  else out << s << "s";
  return out.str();
}
double get(const StepMetrics& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? NAN : it->second;
}
}  // namespace

std::string progress_line(int64_t step, int64_t max_steps, const StepMetrics& metrics, double eta_seconds) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, "step %lld/%lld | reward %.4f | kl %.4g | %.0f tok/s | %.2fs/step | ETA %s",
                static_cast<long long>(step), static_cast<long long>(max_steps), get(metrics, "reward"),
                get(metrics, "kl"), get(metrics, "tokens_per_second"), get(metrics, "step_time"),
                format_duration(eta_seconds).c_str());
  return buffer;
}

int64_t peak_rss_bytes() {
  std::istringstream status(read_text_file("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

}  // namespace rayless
