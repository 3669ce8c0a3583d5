// Stop signals. SIGUSR1, SIGTERM and SIGINT ask for a checkpoint and a clean stop (exit 3): the
// handler only notes the signal; the trainer agrees on it across ranks at the next micro-step
// boundary (one allreduce), so all ranks stop at the same place, and says so once.
//
// A repeated request: SIGUSR1 after any stop signal changes nothing; SIGTERM or SIGINT after any
// stop signal exits at once with 128 + signal number, without a checkpoint ("stop now"). The
// launchers pass a first SIGTERM on as SIGUSR1 (mpirun and srun would kill the ranks) and a second
// as SIGTERM, so a second Ctrl-C or kill stops the run whichever way it was started.
//
// `rayless train` takes them from its first line (a StopSignalScope around the whole command), so a
// signal that comes while the model loads is held and acted on at the first micro-step boundary,
// instead of killing the rank (a preempted job then requeues instead of failing). The trainer's own
// scope nests inside; checkpoint.save_on_signal = false gives the signals their default action back
// (release_stop_signals). Outside every scope the default action applies.
#pragma once
#include <mpi.h>

#include <csignal>

namespace rayless {

class StopSignalScope {
 public:
  StopSignalScope();   // installs the handlers for SIGUSR1, SIGTERM, SIGINT; the outermost scope clears the note
  ~StopSignalScope();  // restores the actions found before
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  struct sigaction previous_[3];  // SIGUSR1, SIGTERM, SIGINT
};

bool stop_requested();      // this process saw a stop signal
int stop_signal_number();   // the first one (0: none)

// The default actions again, inside a scope (checkpoint.save_on_signal = false); a signal noted so
// far is raised again, so it ends the process as it would have without the scope.
void release_stop_signals();

// Collective on `control`: once every rank has entered (each installed its handlers before), rank 0
// creates the file named by $RAYLESS_READY_FILE, when set. The launchers (slurm/common.sh,
// jobs/train-local.sh) hold the signals they receive until it exists: a signal forwarded earlier
// could reach a rank still loading its libraries, which the signal would kill.
void announce_stop_signals_taken(MPI_Comm control, int rank);

}  // namespace rayless
