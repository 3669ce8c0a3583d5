// The collective watchdog: every collective runs inside a CollectiveGuard; a background thread
// checks the deadline, and a collective that has not finished within `distributed.collective_timeout_s`
// prints which collective, step and rank stalled (and, from heartbeat files, which ranks have not
// arrived) and aborts the job (MPI_Abort), so a rank that never arrives (a bug, a crashed peer, a branch on local data) ends the job instead of hanging it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace rayless {

// Process-wide; the thread starts on the first start() and stops at stop() or process exit.
class Watchdog {
 public:
  static Watchdog& instance();

  // timeout_s <= 0 disables the deadline (guards still record names). Safe to call again to change it.
  void start(double timeout_s, int rank);
  void stop();
  double timeout_s() const;

  // The trainer's current optimizer step, printed in the stall message.
  void set_step(int64_t step);
  int64_t step() const;

  // Each rank writes DIR/rank-RRRRR (collectives entered, step, time, host) about once a second, and a
  // stall message names the ranks that have not reached the stalled collective or went quiet. DIR is
  // on the run directory's shared file system (the trainer uses OUTPUT/logs/heartbeat). With the
  // world size, a rank that has written no heartbeat yet (stopped early) is named too; this rank's
  // file from an earlier attempt is removed so it never speaks for this one.
  void set_heartbeat_dir(const std::string& dir, int world_size = 0);
  // Ranks that run different collectives (asynchronous GRPO's training and generation ranks): group[r]
  // is rank r's group. A rank's collective count is compared only with those of its own group; a rank
  // of another group is named only when its heartbeat went quiet. Empty = one group.
  void set_rank_groups(std::vector<int> group);

  // What happens on a stall (default: print the message as "rayless: error: ..." and MPI_Abort(1)).
  // Tests replace it to observe the message without ending the process.
  using StallHandler = std::function<void(const std::string& message)>;
  void set_stall_handler(StallHandler handler);
  void reset_stall_handler();

  // Called by CollectiveGuard.
  void enter(const char* collective);
  void leave();
  // Called by UncountedCollectives.
  void pause_counting(bool paused);

  ~Watchdog();

 private:
  Watchdog() = default;
  struct State;
  State* state_ = nullptr;
  State& state();
};

// RAII: the collective `name` is in flight while this lives. Nested guards: the innermost counts.
class CollectiveGuard {
 public:
  explicit CollectiveGuard(const char* name) { Watchdog::instance().enter(name); }
  ~CollectiveGuard() { Watchdog::instance().leave(); }
  CollectiveGuard(const CollectiveGuard&) = delete;
  CollectiveGuard& operator=(const CollectiveGuard&) = delete;
};

// Collectives run inside this scope are timed as any other but not counted: only some ranks of a group
// run them (asynchronous GRPO's weight pushes: training rank 0 of the training ranks), and the call
// counts the stall message compares must stay comparable within a group.
class UncountedCollectives {
 public:
  UncountedCollectives();
  ~UncountedCollectives();
  UncountedCollectives(const UncountedCollectives&) = delete;
  UncountedCollectives& operator=(const UncountedCollectives&) = delete;
};

// The step setter the trainer calls once per optimizer step.
inline void set_watchdog_step(int64_t step) { Watchdog::instance().set_step(step); }

}  // namespace rayless
