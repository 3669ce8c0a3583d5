// LibTorch's Kineto profiler around one benchmark run, summarised (op_profile.h).
#include "rayless/runtime/op_profile.h"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rayless/base/error.h"

namespace rayless {
namespace {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

// libkineto::ActivityType's values (kineto/ActivityType.h; the same in LibTorch 2.11 and 2.13), as
// KinetoEvent::activityType() returns them
enum KinetoActivity : uint8_t {
  kCpuOp = 0,
  kGpuMemcpy = 3,
  kGpuMemset = 4,
  kKernel = 5,
  kCudaRuntime = 7,
  kCudaDriver = 8,
  kCudaSync = 15,
};

// calls and nanoseconds by name
struct Tally {
  int64_t calls = 0;
  uint64_t ns = 0;
};

nlohmann::json top(const std::map<std::string, Tally>& by_name, uint64_t total_ns, size_t count) {
  std::vector<std::pair<std::string, Tally>> sorted(by_name.begin(), by_name.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < std::min(count, sorted.size()); ++i) {
    const auto& [name, t] = sorted[i];
    // kernel names of templated libraries run to thousands of characters
    out.push_back({{"name", name.size() > 200 ? name.substr(0, 200) + "..." : name},
                   {"calls", t.calls},
                   {"total_ms", double(t.ns) / 1e6},
                   {"mean_us", double(t.ns) / 1e3 / double(std::max<int64_t>(1, t.calls))},
                   {"share", total_ns > 0 ? double(t.ns) / double(total_ns) : 0.0}});
  }
  return out;
}

// The length of the union of [start, end) intervals: the time at least one of them ran.
uint64_t covered_ns(std::vector<std::pair<uint64_t, uint64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  uint64_t covered = 0, reach = 0;
  for (const auto& [start, end] : intervals) {
    const uint64_t from = std::max(start, reach);
    if (end > from) covered += end - from;
    reach = std::max(reach, end);
  }
  return covered;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

OpProfile::OpProfile(const torch::Device& device) : device_(device) {
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(ActivityType::CUDA);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  running_ = true;
}

OpProfile::~OpProfile() {
  if (running_) profiler::disableProfiler();
}

nlohmann::json OpProfile::stop(int64_t steps) {
  if (device_.is_cuda()) torch::cuda::synchronize();
  const auto result = profiler::disableProfiler();
  running_ = false;
  const auto& events = result->events();
  steps = std::max<int64_t>(1, steps);

  // host operators: the top-level ones per thread (not inside another operator), whose times add up
  std::map<uint64_t, std::vector<const profiler::KinetoEvent*>> ops_by_thread;
  std::map<std::string, Tally> kernels, copies, runtime_calls, top_ops;
  std::vector<std::pair<uint64_t, uint64_t>> device_intervals;
  uint64_t first_ns = UINT64_MAX, last_ns = 0, kernel_ns = 0;
  int64_t op_calls = 0, kernel_calls = 0, launches = 0, graph_launches = 0, syncs = 0;
  for (const auto& e : events) {
    const std::string name = e.name();
    const uint8_t kind = e.activityType();
    first_ns = std::min(first_ns, e.startNs());
    last_ns = std::max(last_ns, e.endNs());
    if (kind == kCpuOp) {
      ++op_calls;
      ops_by_thread[e.startThreadId()].push_back(&e);
    } else if (kind == kKernel || kind == kGpuMemcpy || kind == kGpuMemset) {
      device_intervals.emplace_back(e.startNs(), e.endNs());
      auto& t = (kind == kKernel ? kernels : copies)[name];
      ++t.calls;
      t.ns += e.durationNs();
      if (kind == kKernel) ++kernel_calls, kernel_ns += e.durationNs();
    } else if (kind == kCudaRuntime || kind == kCudaDriver) {
      auto& t = runtime_calls[name];
      ++t.calls;
      t.ns += e.durationNs();
      if (name == "cudaGraphLaunch") ++graph_launches;
      else if (starts_with(name, "cudaLaunchKernel") || starts_with(name, "cuLaunchKernel")) ++launches;
      // calls that make the host wait for the device
      if (name == "cudaStreamSynchronize" || name == "cudaDeviceSynchronize" || name == "cudaEventSynchronize" ||
          name == "cudaMemcpy")
        ++syncs;
    } else if (kind == kCudaSync) {
      ++syncs;
    }
  }
  uint64_t top_ops_ns = 0;
  for (auto& [thread, ops] : ops_by_thread) {
    std::sort(ops.begin(), ops.end(), [](const auto* a, const auto* b) {
      return a->startNs() != b->startNs() ? a->startNs() < b->startNs() : a->endNs() > b->endNs();
    });
    uint64_t open_until = 0;  // the end of the top-level operator that is running
    for (const auto* op : ops) {
      if (op->startNs() < open_until) continue;  // inside it
      open_until = op->endNs();
      auto& t = top_ops[op->name()];
      ++t.calls;
      t.ns += op->durationNs();
      top_ops_ns += op->durationNs();
    }
  }
  const uint64_t wall_ns = last_ns > first_ns ? last_ns - first_ns : 0;
  const uint64_t busy_ns = covered_ns(device_intervals);
  nlohmann::json summary = {
      {"device", device_.str()},
      {"steps", steps},
      {"recorded_ms", double(wall_ns) / 1e6},
      {"host_operator_calls", op_calls},
      {"host_operator_calls_per_step", double(op_calls) / double(steps)},
      {"top_level_operators_ms", double(top_ops_ns) / 1e6},
      {"top_level_operators", top(top_ops, top_ops_ns, top_ops.size())},  // all: a few hundred names
  };
  if (device_.is_cuda()) {
    summary["device_busy_ms"] = double(busy_ns) / 1e6;
    summary["device_busy_share"] = wall_ns > 0 ? double(busy_ns) / double(wall_ns) : 0.0;
    summary["kernels"] = kernel_calls;
    summary["kernels_per_step"] = double(kernel_calls) / double(steps);
    summary["kernel_launches_per_step"] = double(launches) / double(steps);
    summary["graph_launches_per_step"] = double(graph_launches) / double(steps);
    summary["host_waits_per_step"] = double(syncs) / double(steps);
    summary["top_kernels"] = top(kernels, kernel_ns, 25);
    summary["copies"] = top(copies, busy_ns, 10);
    uint64_t runtime_ns = 0;
    for (const auto& [name, t] : runtime_calls) runtime_ns += t.ns;
    summary["runtime_calls"] = top(runtime_calls, runtime_ns, 12);
  }
  return summary;
}

// One line of the summary for the console.
std::string profile_line(const nlohmann::json& s) {
  const int64_t steps = s["steps"].get<int64_t>();
  std::string line = str("profile: ", steps, steps == 1 ? " step in " : " steps in ", s["recorded_ms"].get<double>(), " ms, ",
                         s["host_operator_calls_per_step"].get<double>(), " host operators per step");
  if (s.contains("device_busy_share"))
    line += str(", the device busy ", 100.0 * s["device_busy_share"].get<double>(), " % of the time, ",
                s["kernels_per_step"].get<double>(), " kernels and ", s["host_waits_per_step"].get<double>(),
                " host waits per step");
  const auto& heading = s.contains("top_kernels") && !s["top_kernels"].empty() ? s["top_kernels"] : s["top_level_operators"];
  if (!heading.empty())
    line += str("; first: ", heading[0]["name"].get<std::string>(), " (", 100.0 * heading[0]["share"].get<double>(), " %)");
  return line;
}

}  // namespace rayless
