// Preemption signals: SIGUSR1 or SIGTERM ask for a checkpoint and a clean stop. The handler only sets
// a flag; the trainer agrees on it across ranks at the next micro-step boundary (one allreduce), so all
// ranks stop at the same place. A second signal exits at once with 128 + signal number.
#pragma once

namespace rayless {

void install_stop_signal_handlers();  // SIGUSR1, SIGTERM
bool stop_requested();                // this process saw a signal

}  // namespace rayless
