#include "rayless/runtime/watchdog.h"

#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
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
  int uncounted = 0;                // depth of UncountedCollectives scopes
  std::vector<InFlight> in_flight;  // stack of nested guards
  StallHandler handler;
  std::string heartbeat_dir;        // where each rank's heartbeat file lives ("" = none)
  int world_size = 0;               // ranks expected to write one (0 = unknown)
  std::vector<int> groups;          // each rank's group (empty: one group); counts compare within a group
  Clock::time_point last_heartbeat;
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

namespace {

std::string heartbeat_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d", rank);
  return name;
}

// "calls step unix-seconds host", written under a temporary name and renamed: a reader on another
// node sees a whole line or the previous one.
void write_heartbeat(const std::string& dir, int rank, uint64_t calls, int64_t step) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::filesystem::path path = std::filesystem::path(dir) / heartbeat_name(rank);
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << calls << " " << step << " " << std::time(nullptr) << " " << host << "\n";
    if (!out) return;  // best effort: a full disk must not turn into a stall report
  }
  std::error_code ignored;
  std::filesystem::rename(tmp, path, ignored);
}

// The ranks that have not reached collective call #calls, or whose heartbeat went quiet, as read
// from the other ranks' heartbeat files: "rank 2 (node2: silent for 14 s, last at step 3, collective
// #51)"; with world_size > 0 also the ranks without a file: "rank 1 (no heartbeat yet)". Empty when
// nothing is known. Heartbeats are written about once a second, so "last at" may lag by that much.
std::string missing_ranks(const std::string& dir, int me, int world_size, uint64_t calls, double quiet_s,
                          const std::vector<int>& groups) {
  auto group_of = [&](int rank) { return rank >= 0 && rank < static_cast<int>(groups.size()) ? groups[rank] : 0; };
  std::error_code error;
  std::map<int, std::string> missing;
  std::vector<bool> seen(static_cast<size_t>(std::max(world_size, 0)), false);
  const std::time_t now = std::time(nullptr);
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 10 || name.rfind("rank-", 0) != 0) continue;
    const int rank = std::atoi(name.c_str() + 5);
    if (rank == me || (world_size > 0 && rank >= world_size)) continue;
    std::ifstream in(entry.path());
    uint64_t their_calls = 0;
    int64_t step = -1;
    long long at = 0;
    std::string host;
    if (!(in >> their_calls >> step >> at >> host)) continue;
    if (world_size > 0) seen[static_cast<size_t>(rank)] = true;
    const double silent = std::difftime(now, static_cast<std::time_t>(at));
    const bool counts_compare = group_of(rank) == group_of(me);
    if ((their_calls >= calls || !counts_compare) && silent < quiet_s) continue;
    missing[rank] = str("rank ", rank, " (", host, ": silent for ", static_cast<long long>(silent), " s, last at step ",
                        step, ", collective #", their_calls, ")");
  }
  for (int rank = 0; rank < world_size; ++rank)
    if (rank != me && !seen[static_cast<size_t>(rank)]) missing[rank] = str("rank ", rank, " (no heartbeat yet)");
  std::string out;
  for (const auto& [rank, text] : missing) out += (out.empty() ? "" : ", ") + text;
  return out;
}

}  // namespace

void Watchdog::set_heartbeat_dir(const std::string& dir, int world_size) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!dir.empty()) std::filesystem::remove(std::filesystem::path(dir) / heartbeat_name(s.rank), ignored);
  s.heartbeat_dir = dir;
  s.world_size = world_size;
  s.last_heartbeat = Clock::time_point();
}

void Watchdog::set_rank_groups(std::vector<int> group) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.groups = std::move(group);
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
      if (s.running && !s.heartbeat_dir.empty() && Clock::now() - s.last_heartbeat >= std::chrono::seconds(1)) {
        s.last_heartbeat = Clock::now();
        const std::string dir = s.heartbeat_dir;
        const uint64_t calls = s.calls;
        const int64_t step = s.step;
        const int rank = s.rank;
        lock.unlock();  // file I/O without the lock: guards must never wait on it
        write_heartbeat(dir, rank, calls, step);
        lock.lock();
      }
      if (!s.running || s.fired || s.timeout_s <= 0 || s.in_flight.empty()) continue;
      const InFlight& top = s.in_flight.back();
      double waited = std::chrono::duration<double>(Clock::now() - top.since).count();
      if (waited < s.timeout_s) continue;
      s.fired = true;
      std::string message = str("collective ", top.name, " stalled on rank ", s.rank, " at step ", s.step,
                                " (collective call #", s.calls, "): not finished after ", waited,
                                " s (distributed.collective_timeout_s = ", s.timeout_s,
                                "); another rank failed or skipped it; aborting the job");
      if (!s.heartbeat_dir.empty()) {
        // who is missing, from the heartbeat files the ranks write beside the run
        const std::string missing =
            missing_ranks(s.heartbeat_dir, s.rank, s.world_size, s.calls, std::max(5.0, s.timeout_s / 2), s.groups);
        message += missing.empty() ? std::string("; every other rank's heartbeat is recent")
                                   : "; not arrived: " + missing;
      }
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
  if (s.uncounted == 0) ++s.calls;
}

void Watchdog::pause_counting(bool paused) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.uncounted += paused ? 1 : -1;
}

UncountedCollectives::UncountedCollectives() { Watchdog::instance().pause_counting(true); }
UncountedCollectives::~UncountedCollectives() { Watchdog::instance().pause_counting(false); }

void Watchdog::leave() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.in_flight.empty()) s.in_flight.pop_back();
}

}  // namespace rayless
