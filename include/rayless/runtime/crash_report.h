// What a rank prints when it dies of a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE): one report on
// stderr with the rank, host, pid and thread, the signal and its cause, the faulting address and
// instruction, and the backtrace. A jump to address 0 (a call through a null function pointer) leaves
// the unwinder nothing to start from, so Open MPI's own handler printed one frame for it; this report
// first steps back to the caller (the return address on top of the stack) and unwinds from there.
// After the report the signal takes its default action (a core dump where enabled), so the exit
// status that srun and mpirun see is the signal's, as before.
#pragma once

namespace rayless {

// Installs the handler for the fatal signals that have none yet (the default action). Call it before
// MPI_Init: Open MPI installs its own only where no handler is set. A sanitizer's handler is kept.
// Returns whether SIGSEGV's handler is now this one. Idempotent.
bool install_crash_report();

// The rank the report names (-1, the default: "rank ?"). Set once MPI knows it.
void set_crash_report_rank(int rank);

}  // namespace rayless
