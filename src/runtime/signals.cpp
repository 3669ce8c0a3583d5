#include "rayless/runtime/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace rayless {
namespace {
std::atomic<int> g_signal{0};

void on_stop_signal(int signal_number) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, signal_number)) _exit(128 + signal_number);  // second signal
  static const char message[] = "rayless: signal received: checkpointing at the next step boundary\n";
  ssize_t ignored = write(STDERR_FILENO, message, sizeof message - 1);
  (void)ignored;
}
}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }

}  // namespace rayless
