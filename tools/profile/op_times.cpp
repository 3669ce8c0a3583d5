// Where a run's time goes, by ATen operator and autograd node: a library preloaded into rayless (or
// rayless-bench) that times every top-level ATen call and every autograd node's evaluation
// (RecordFunction, inclusive of what they call), and on SIGUSR2 prints the totals since the last print
// and starts again (rayless keeps SIGUSR1 for its checkpoint-and-stop). Built as librayless-op-times.so
// (CMake target rayless-op-times). The profiles it gave: docs/notes/bench-xeon.md and
// bench-epyc.md.
//
//   LD_PRELOAD=build/librayless-op-times.so build/rayless train --config ... &   # then, between steps:
//   kill -USR2 <pid>    # first: forget what came before; later: print the window to stderr
//   OP_TIMES_AT_EXIT=1 LD_PRELOAD=build/librayless-op-times.so build/rayless generate ...
//                       # or: print the whole run once, at exit (tools/gpu/device_check.sh's profile step)
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Call : at::ObserverContext {
  Clock::time_point start;
  int depth = 0;
};

thread_local int call_depth = 0;
std::mutex totals_lock;
std::map<std::string, std::pair<double, long>> seconds_and_calls;  // top-level calls by name
Clock::time_point window_start = Clock::now();
volatile std::sig_atomic_t print_requested = 0;

void print_window() {
  std::lock_guard<std::mutex> guard(totals_lock);
  const double window = std::chrono::duration<double>(Clock::now() - window_start).count();
  std::vector<std::pair<double, std::string>> rows;
  double timed = 0;
  for (const auto& [name, total] : seconds_and_calls) {
    rows.emplace_back(total.first, name + " x" + std::to_string(total.second));
    timed += total.first;
  }
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "=== window %.3f s, top-level calls %.3f s\n", window, timed);
  for (size_t i = 0; i < rows.size() && i < 45; ++i)
    std::fprintf(stderr, "%8.1f ms %5.1f%%  %s\n", rows[i].first * 1e3, 100 * rows[i].first / window, rows[i].second.c_str());
  seconds_and_calls.clear();
  window_start = Clock::now();
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) {
  if (print_requested) {  // printed from a call, not from the signal handler
    print_requested = 0;
    print_window();
  }
  auto call = std::make_unique<Call>();
  call->start = Clock::now();
  call->depth = call_depth++;
  return call;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext* context) {
  const auto* call = static_cast<Call*>(context);
  --call_depth;
  if (call->depth != 0) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - call->start).count();
  std::lock_guard<std::mutex> guard(totals_lock);
  auto& total = seconds_and_calls[fn.name()];
  total.first += seconds;
  ++total.second;
}

const bool installed = [] {
  std::signal(SIGUSR2, [](int) { print_requested = 1; });
  if (std::getenv("OP_TIMES_AT_EXIT")) std::atexit(print_window);
  at::addGlobalCallback(
      at::RecordFunctionCallback(on_enter, on_exit).scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  return true;
}();

}  // namespace
