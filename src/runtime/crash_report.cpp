#include "rayless/runtime/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

namespace rayless {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
std::atomic<int> g_rank{-1};
char g_host[128] = "?";
// the handler runs here, so that a stack overflow can still be reported (main thread only)
alignas(64) char g_alternate_stack[64 * 1024];

// The report is built in one buffer and written with write(2): nothing in the handler allocates.
struct Line {
  char text[512];
  size_t size = 0;
  Line& operator<<(const char* s) {
    while (*s && size + 1 < sizeof text) text[size++] = *s++;
    return *this;
  }
  Line& number(unsigned long long value, int base) {
    char digits[32];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[value % static_cast<unsigned>(base)];
      value /= static_cast<unsigned>(base);
    } while (value);
    if (base == 16) *this << "0x";
    while (n > 0 && size + 1 < sizeof text) text[size++] = digits[--n];
    return *this;
  }
  Line& operator<<(long long value) {
    if (value < 0) {
      *this << "-";
      return number(static_cast<unsigned long long>(-value), 10);
    }
    return number(static_cast<unsigned long long>(value), 10);
  }
  Line& hex(const void* p) { return number(reinterpret_cast<uintptr_t>(p), 16); }
  void write_out() {
    text[size++] = '\n';
    for (size_t done = 0; done < size;) {
      const ssize_t w = ::write(STDERR_FILENO, text + done, size - done);
      if (w <= 0) break;
      done += static_cast<size_t>(w);
    }
    size = 0;
  }
};

const char* signal_text(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    default: return "signal";
  }
}

const char* cause_text(int sig, int code) {
  if (code == SI_USER) return "sent by kill";
  if (code == SI_TKILL) return "sent by tgkill/raise";
  switch (sig) {
    case SIGSEGV:
      if (code == SEGV_MAPERR) return "address not mapped";
      if (code == SEGV_ACCERR) return "no permission for the access";
      break;
    case SIGBUS:
      if (code == BUS_ADRALN) return "misaligned address";
      if (code == BUS_ADRERR) return "no such physical address (a mapped file cut short?)";
      if (code == BUS_OBJERR) return "hardware error on the object";
      break;
    case SIGILL: return "illegal instruction (a CPU without an instruction this build uses?)";
    case SIGFPE:
      if (code == FPE_INTDIV) return "integer division by zero";
      if (code == FPE_INTOVF) return "integer overflow";
      return "arithmetic exception";
  }
  return "cause not given";
}

// The interrupted instruction and stack pointer in the saved context (the one sigreturn restores and
// the unwinder reads), or null where this architecture is not handled.
void** instruction_slot(ucontext_t* uc) {
#if defined(__x86_64__)
  return reinterpret_cast<void**>(&uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return reinterpret_cast<void**>(&uc->uc_mcontext.pc);
#else
  (void)uc;
  return nullptr;
#endif
}

// A jump to 0 has no unwind information to start from. A call pushed its return address (x86-64) or
// left it in the link register (AArch64): step_to_caller resumes the saved context there, as a return
// would, so that the unwinder starts from the caller, and returns that address (null where this
// architecture is not handled); put_back restores the context before the signal's default action.
struct CallerStep {
  void* caller = nullptr;
  uintptr_t stack_pointer = 0;  // before the step (x86-64)
};

CallerStep step_to_caller(ucontext_t* uc, void** pc_slot) {
  CallerStep step;
#if defined(__x86_64__)
  step.stack_pointer = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  step.caller = *reinterpret_cast<void**>(step.stack_pointer);
  if (step.caller) uc->uc_mcontext.gregs[REG_RSP] += static_cast<greg_t>(sizeof(void*));
#elif defined(__aarch64__)
  step.caller = reinterpret_cast<void*>(uc->uc_mcontext.regs[30]);
#else
  (void)uc;
#endif
  if (step.caller) *pc_slot = step.caller;
  return step;
}

void put_back(ucontext_t* uc, void** pc_slot, const CallerStep& step) {
  *pc_slot = nullptr;
#if defined(__x86_64__)
  uc->uc_mcontext.gregs[REG_RSP] = static_cast<greg_t>(step.stack_pointer);
#else
  (void)uc;
  (void)step;
#endif
}

void on_fatal_signal(int sig, siginfo_t* info, void* context) {
  // SA_RESETHAND put the default action back: a fault inside this report ends the process at once
  auto* uc = static_cast<ucontext_t*>(context);
  void** pc_slot = instruction_slot(uc);
  void* const pc = pc_slot ? *pc_slot : nullptr;
  Line line;
  line << "rayless: rank ";
  const int rank = g_rank.load();
  if (rank >= 0) line << static_cast<long long>(rank); else line << "?";
  line << " (host " << g_host << ", pid " << static_cast<long long>(getpid()) << ", thread "
       << static_cast<long long>(syscall(SYS_gettid)) << ") died of " << signal_text(sig) << " ("
       << cause_text(sig, info->si_code) << ")";
  if (sig == SIGSEGV || sig == SIGBUS) (line << " at address ").hex(info->si_addr);
  if (pc_slot) (line << ", instruction ").hex(pc);
  line.write_out();

  CallerStep step;
  if (pc == nullptr && pc_slot) step = step_to_caller(uc, pc_slot);
  if (step.caller) {
    line << "rayless: the instruction address is 0: a call through a null function pointer, made from:";
    line.write_out();
    backtrace_symbols_fd(&step.caller, 1, STDERR_FILENO);
  }

  line << "rayless: backtrace (a frame without a name: addr2line -Cfe FILE OFFSET):";
  line.write_out();
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);

  if (step.caller) put_back(uc, pc_slot, step);
  // blocked until this handler returns, then the default action (the fault would repeat anyway)
  raise(sig);
}

}  // namespace

bool install_crash_report() {
  static bool installed_once = false;
  if (!installed_once) {
    installed_once = true;
    gethostname(g_host, sizeof g_host - 1);
    void* warm[2];
    backtrace(warm, 2);  // loads the unwinder now: the first call may allocate, not in a handler
    stack_t alternate{};
    alternate.ss_sp = g_alternate_stack;
    alternate.ss_size = sizeof g_alternate_stack;
    sigaltstack(&alternate, nullptr);
    struct sigaction action {};
    action.sa_sigaction = on_fatal_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
    for (int sig : kFatalSignals) {
      struct sigaction current {};
      sigaction(sig, nullptr, &current);
      const bool is_default = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
      if (is_default) sigaction(sig, &action, nullptr);
    }
  }
  struct sigaction segv {};
  sigaction(SIGSEGV, nullptr, &segv);
  return (segv.sa_flags & SA_SIGINFO) && segv.sa_sigaction == on_fatal_signal;
}

void set_crash_report_rank(int rank) { g_rank = rank; }

}  // namespace rayless
