#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "rayless/runtime/crash_report.h"

using namespace rayless;

namespace {

using Function = void (*)();
volatile Function g_null_function = nullptr;
volatile int g_after_call = 0;

// Calls through a null pointer. Not a tail call (something follows it), so the return address on the
// stack lies inside this function. On x86-64 the call is written out: clang's -fsanitize=function
// (the sanitizer build) reads before an indirect call's target and would fault here, before the jump.
__attribute__((noinline)) void call_through_null_pointer() {
#if defined(__x86_64__)
  asm volatile("xorl %%eax, %%eax\n\tcall *%%rax" ::: "rax", "memory");
#else
  g_null_function();
#endif
  g_after_call = g_after_call + 1;
}

__attribute__((noinline)) void read_from_address_0x10() {
  volatile int* p = reinterpret_cast<volatile int*>(0x10);
  g_after_call = *p;
  g_after_call = g_after_call + 1;
}

// A function's first and last byte, as the compiler laid them out: from its address to the next
// function's (the test reads addresses in the report, so only the range matters).
struct Range {
  uintptr_t begin, end;
  bool holds(uintptr_t a) const { return a >= begin && a < end; }
};
Range range_of(void (*f)(), size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(f);
  return {begin, begin + bytes};
}

struct Death {
  std::string report;
  int status = 0;
};

// Runs crash() in a child with the report installed (rank 7) and its stderr captured.
Death die_in_child(void (*crash)()) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    // a sanitizer's handler stays where one is set; the child puts the default back first
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE}) signal(sig, SIG_DFL);
    if (!install_crash_report()) _exit(90);
    set_crash_report_rank(7);
    crash();
    _exit(91);
  }
  close(fds[1]);
  Death death;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) death.report.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, &death.status, 0);
  return death;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// "[0x...]" at the end of a backtrace_symbols line: the frame's absolute address
uintptr_t frame_address(const std::string& line) {
  const auto open = line.rfind("[0x");
  if (open == std::string::npos) return 0;
  return static_cast<uintptr_t>(std::strtoull(line.c_str() + open + 1, nullptr, 16));
}

// The report of crash() in a child that must have died of SIGSEGV.
std::string sigsegv_report_of(void (*crash)()) {
  const Death death = die_in_child(crash);
  INFO(death.report);
  REQUIRE(WIFSIGNALED(death.status));
  CHECK(WTERMSIG(death.status) == SIGSEGV);
  return death.report;
}

// Whether a backtrace line from `first` on has its address in `range`.
bool any_frame_in(const std::vector<std::string>& lines, size_t first, const Range& range) {
  for (size_t i = first; i < lines.size(); ++i)
    if (range.holds(frame_address(lines[i]))) return true;
  return false;
}

}  // namespace

TEST_CASE("crash report: a call through a null pointer names its caller and still ends by SIGSEGV") {
  const std::string report = sigsegv_report_of(call_through_null_pointer);
  INFO(report);
  const auto lines = lines_of(report);
  REQUIRE(lines.size() >= 4);
  CHECK(lines[0].rfind("rayless: rank 7 (host ", 0) == 0);
  CHECK(lines[0].find("died of SIGSEGV (address not mapped) at address 0x0, instruction 0x0") != std::string::npos);
  CHECK(lines[1] == "rayless: the instruction address is 0: a call through a null function pointer, made from:");
  // the return address lies in the calling function, just after its call instruction
  const Range caller = range_of(call_through_null_pointer, 64);
  CHECK(caller.holds(frame_address(lines[2])));
  CHECK(lines[3].rfind("rayless: backtrace", 0) == 0);
  // and the unwinder, started from the caller, goes on past it: its frame is in the backtrace
  CHECK(any_frame_in(lines, 4, caller));
  CHECK(lines.size() > 6);  // call_through_null_pointer's callers are there too
}

TEST_CASE("crash report: a bad read names the address and the faulting function") {
  const std::string report = sigsegv_report_of(read_from_address_0x10);
  INFO(report);
  const auto lines = lines_of(report);
  REQUIRE(lines.size() >= 3);
  CHECK(lines[0].find("died of SIGSEGV (address not mapped) at address 0x10, instruction 0x") != std::string::npos);
  CHECK(lines[1].rfind("rayless: backtrace", 0) == 0);
  CHECK(any_frame_in(lines, 2, range_of(read_from_address_0x10, 64)));
}

TEST_CASE("crash report: a handler already set (a sanitizer's, a debugger's) is kept") {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    struct sigaction mine {};
    mine.sa_handler = [](int) { _exit(42); };
    sigemptyset(&mine.sa_mask);
    sigaction(SIGSEGV, &mine, nullptr);
    signal(SIGBUS, SIG_DFL);
    const bool took_segv = install_crash_report();
    struct sigaction after {};
    sigaction(SIGSEGV, nullptr, &after);
    struct sigaction bus {};
    sigaction(SIGBUS, nullptr, &bus);
    // SIGSEGV keeps its handler; SIGBUS, which had none, gets the report
    _exit(!took_segv && after.sa_handler == mine.sa_handler && (bus.sa_flags & SA_SIGINFO) ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
