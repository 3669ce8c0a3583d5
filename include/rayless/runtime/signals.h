// Stop signals. SIGUSR1, SIGTERM and SIGINT ask for a checkpoint and a clean stop (exit 3): the
// handler only notes the signal; the trainer agrees on it across ranks at the next micro-step
// boundary (one allreduce), so all ranks stop at the same place, and says so once.
//
// A repeated request: SIGUSR1 again changes nothing (launchers forward it on top of Slurm's own
// SIGTERM); a second SIGTERM or SIGINT after a first SIGTERM or SIGINT exits at once with
// 128 + signal number, without a checkpoint ("stop now").
//
// The handlers are installed only while training runs (StopSignalScope); outside it the default
// action applies, so a launcher's SIGTERM at the end of a failed job ends the process quietly.
#pragma once

namespace rayless {

class StopSignalScope {
 public:
  StopSignalScope();   // installs the handlers for SIGUSR1, SIGTERM, SIGINT
  ~StopSignalScope();  // restores the actions found before
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;
};

bool stop_requested();      // this process saw a stop signal
int stop_signal_number();   // the first one (0: none)

}  // namespace rayless
