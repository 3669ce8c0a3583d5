#include "rayless/runtime/watchdog.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "rayless/base/error.h"

namespace rayless {

namespace {
using Clock = std::chrono::steady_clock;

struct InFlight {
  const char* name;
  Clock::time_point since;
};
}  // namespace

struct Watchdog::State {
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::thread thread;
  bool running = false;
  bool fired = false;
  double timeout_s = 0;
  int rank = 0;
  int64_t step = -1;
  uint64_t calls = 0;               // collectives entered so far: says how far this rank got
  std::vector<InFlight> in_flight;  // stack of nested guards
  StallHandler handler;
};

Watchdog& Watchdog::instance() {
  // never destroyed: static objects destroyed at exit (a Runtime, say) may still stop it
  static Watchdog* watchdog = new Watchdog();
  return *watchdog;
}

Watchdog::State& Watchdog::state() {
  // created once, on first use, before any thread exists
  if (!state_) state_ = new State();
  return *state_;
}

Watchdog::~Watchdog() { stop(); }

static void default_stall(const std::string& message) {
  print_error(message);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, kExitRuntime);
  std::_Exit(kExitRuntime);
}

void Watchdog::start(double timeout_s, int rank) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.timeout_s = timeout_s;
    s.rank = rank;
    s.fired = false;
    if (s.running) {
      s.wake.notify_all();
      return;
    }
    s.running = true;
  }
  s.thread = std::thread([&s] {
    std::unique_lock<std::mutex> lock(s.mutex);
    while (s.running) {
      // poll often enough that a stall is seen within ~10 % of the timeout (at most every second)
      double poll_s = s.timeout_s > 0 ? std::min(1.0, std::max(0.01, s.timeout_s / 10)) : 1.0;
      s.wake.wait_for(lock, std::chrono::duration<double>(poll_s));
      if (!s.running || s.fired || s.timeout_s <= 0 || s.in_flight.empty()) continue;
      const InFlight& top = s.in_flight.back();
      double waited = std::chrono::duration<double>(Clock::now() - top.since).count();
      if (waited < s.timeout_s) continue;
      s.fired = true;
      std::string message = str("collective ", top.name, " stalled on rank ", s.rank, " at step ", s.step,
                                " (collective call #", s.calls, "): not finished after ", waited,
                                " s (distributed.collective_timeout_s = ", s.timeout_s,
                                "); another rank failed or skipped it; aborting the job");
      StallHandler handler = s.handler;
      lock.unlock();
      if (handler)
        handler(message);
      else
        default_stall(message);
      lock.lock();
    }
  });
}

void Watchdog::stop() {
  if (!state_) return;
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.running) return;
    s.running = false;
  }
  s.wake.notify_all();
  if (s.thread.joinable()) s.thread.join();
}

double Watchdog::timeout_s() const {
  if (!state_) return 0;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->timeout_s;
}

void Watchdog::set_step(int64_t step) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.step = step;
}

int64_t Watchdog::step() const {
  if (!state_) return -1;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->step;
}

void Watchdog::set_stall_handler(StallHandler handler) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.handler = std::move(handler);
  s.fired = false;
}

void Watchdog::reset_stall_handler() { set_stall_handler(nullptr); }

void Watchdog::enter(const char* collective) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.in_flight.push_back({collective, Clock::now()});
  ++s.calls;
}

void Watchdog::leave() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.in_flight.empty()) s.in_flight.pop_back();
}

}  // namespace rayless
