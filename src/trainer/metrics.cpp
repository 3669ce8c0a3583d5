#include "rayless/trainer/metrics.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <sstream>

#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/log.h"

namespace fs = std::filesystem;

namespace rayless {

MetricsLog::MetricsLog(const fs::path& path, int64_t resume_step) : path_(path) {
  if (resume_step >= 0 && fs::exists(path)) {
    std::istringstream old(read_text_file(path));
    std::string kept, line;
    int64_t line_number = 0, torn = 0;
    while (std::getline(old, line)) {
      ++line_number;
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
        if (torn++ == 0) log_warn(str(path.string(), ":", line_number, ": dropped a line that is not a whole metrics record (torn by an interrupted write)"));
        continue;
      }
      if (j["step"].get<int64_t>() > resume_step) continue;
      kept += line + "\n";
    }
    write_text_atomically(path, kept);
  }
  errno = 0;
  out_.open(path, std::ios::app);
  ioCheck(out_.good(), "cannot open ", path.string(), " for writing");
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
  errno = 0;
  out_ << line.dump() << "\n";
  out_.flush();
  ioCheck(out_.good(), "cannot write ", path_.string(), " (step ", step, ")");
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
  // fields a step does not have (kl without a reference model, reward between generations) are left out
  std::ostringstream out;
  out << "step " << step << "/" << max_steps;
  char buffer[64];
  auto field = [&](const char* label, const char* key, const char* format) {
    const double v = get(metrics, key);
    if (std::isnan(v)) return;
    std::snprintf(buffer, sizeof buffer, format, v);
    out << " | " << label << " " << buffer;
  };
  field("reward", "reward", "%.4f");
  field("kl", "kl", "%.4g");
  field("entropy", "entropy", "%.3f");
  field("tok/s", "tokens_per_second", "%.0f");
  field("s/step", "step_time", "%.2f");
  out << " | ETA " << format_duration(eta_seconds);
  return out.str();
}

int64_t peak_rss_bytes() {
  std::istringstream status(read_text_file("/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

std::optional<DeviceMemoryPeaks> device_memory_peaks(const c10::Device& device) {
  if (device.is_cpu()) return std::nullopt;
  const auto stats = c10::getDeviceAllocator(device.type())->getDeviceStats(device.index());
  constexpr auto all_pools = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  return DeviceMemoryPeaks{stats.allocated_bytes[all_pools].peak, stats.reserved_bytes[all_pools].peak};
}

}  // namespace rayless
