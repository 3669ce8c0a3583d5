#include "rayless/runtime/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "rayless/base/files.h"

namespace rayless {
namespace {
std::atomic<int> g_first_signal{0};
constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT};
int g_scope_depth = 0;  // scopes are made and ended on the main thread

void on_stop_signal(int signal_number) {
  int none = 0;
  const bool first = g_first_signal.compare_exchange_strong(none, signal_number);
  // SIGTERM or SIGINT after an earlier request: stop now (a launcher passes the first one on as SIGUSR1)
  if (!first && (signal_number == SIGTERM || signal_number == SIGINT)) _exit(128 + signal_number);
}
}  // namespace

StopSignalScope::StopSignalScope() {
  if (g_scope_depth++ == 0) g_first_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &action, &previous_[i]);
}

StopSignalScope::~StopSignalScope() {
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &previous_[i], nullptr);
  --g_scope_depth;
}

bool stop_requested() { return g_first_signal.load() != 0; }
int stop_signal_number() { return g_first_signal.load(); }

void release_stop_signals() {
  for (int signal_number : kStopSignals) std::signal(signal_number, SIG_DFL);
  if (const int noted = g_first_signal.load()) std::raise(noted);
}

void announce_stop_signals_taken(MPI_Comm control, int rank) {
  int here = 1, everywhere = 0;
  MPI_Allreduce(&here, &everywhere, 1, MPI_INT, MPI_SUM, control);  // every rank has entered: its handlers are in
  const char* file = std::getenv("RAYLESS_READY_FILE");
  if (rank != 0 || file == nullptr || *file == '\0') return;
  const std::filesystem::path path(file);
  std::error_code ignored;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ignored);
  write_text_atomically(path, "every rank takes stop signals\n");
}

}  // namespace rayless
