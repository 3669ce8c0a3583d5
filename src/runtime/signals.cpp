#include "rayless/runtime/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace rayless {
namespace {
std::atomic<int> g_first_signal{0};
std::atomic<bool> g_terminate_seen{false};
constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT};
struct sigaction g_previous[3];

void on_stop_signal(int signal_number) {
  const bool terminate = signal_number == SIGTERM || signal_number == SIGINT;
  if (terminate && g_terminate_seen.exchange(true)) _exit(128 + signal_number);  // second TERM/INT: stop now
  int none = 0;
  g_first_signal.compare_exchange_strong(none, signal_number);
}
}  // namespace

StopSignalScope::StopSignalScope() {
  g_first_signal = 0;
  g_terminate_seen = false;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &action, &g_previous[i]);
}

StopSignalScope::~StopSignalScope() {
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
}

bool stop_requested() { return g_first_signal.load() != 0; }
int stop_signal_number() { return g_first_signal.load(); }

}  // namespace rayless
