// Errors: what the user did wrong (exit 2) vs what broke at run time (exit 1). Every message reaches
// the user as one line "rayless: error: <message>", so messages name the file, key or line at fault.
#pragma once
#include <cerrno>
#include <sstream>
#include <stdexcept>
#include <string>

namespace rayless {

// Bad usage, config, dataset, model files, tokenizer, rollout files, reward worker output: exit 2.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// Something failed while running (I/O, a collective, a worker crashed): exit 1.
class RuntimeError : public std::runtime_error {
 public:
  explicit RuntimeError(const std::string& message) : std::runtime_error(message) {}
};

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitInput = 2;
constexpr int kExitCheckpointedOnSignal = 3;  // stopped on SIGUSR1/SIGTERM after writing a checkpoint
constexpr int kExitNonfinite = 4;   // stopped: train.max_nonfinite_steps non-finite steps in a row, or a
                                    // checkpoint that would hold a non-finite tensor (none was written)
constexpr int kExitOutOfMemory = 5;  // an allocation failed (host or device): lower the named settings

// The run stopped because its numbers stopped being finite (exit 4): the weights are not to be trusted
// past the last checkpoint, and a rerun without a change (a lower learning rate, other data) would
// only meet the same.
class NonfiniteError : public RuntimeError {
 public:
  explicit NonfiniteError(const std::string& message) : RuntimeError(message) {}
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  append_all(out, rest...);
}
}  // namespace detail

// str("a", 1, "b") -> "a1b": builds error messages without a stream at every call site.
template <typename... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream out;
  detail::append_all(out, parts...);
  return out.str();
}

// Exit code for an exception caught at the top of a command: 2 for an InputError, 4 for a
// NonfiniteError, 5 for a failed allocation (failure_message.h), else 1.
int exit_code_for(const std::exception& error);

// "rayless: error: <what>" on stderr, one line (newlines in the message become spaces).
void print_error(const std::string& message);

// The system's reason for a failed call, from the errno captured right after it ("No space left on
// device"); "I/O error" when the failing layer left errno at 0.
std::string os_reason(int error_number);

}  // namespace rayless

// inputCheck(cond, parts...): throws InputError (exit 2) with the message when cond is false.
#define inputCheck(cond, ...)                                          \
  do {                                                                 \
    if (!(cond)) throw ::rayless::InputError(::rayless::str(__VA_ARGS__)); \
  } while (0)

// runtimeCheck(cond, parts...): throws RuntimeError (exit 1); the message carries file and line,
// since it reports a failure of the program or the system rather than of the user's input.
#define runtimeCheck(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond))                                                                            \
      throw ::rayless::RuntimeError(::rayless::str(__VA_ARGS__, " (", __FILE__, ":", __LINE__, ")")); \
  } while (0)

// ioCheck(cond, parts...): a failed write/create/rename: throws RuntimeError (exit 1) naming the path
// (in parts) and the system's reason. Callers set errno = 0 before the operation, so a stale errno is
// never blamed.
#define ioCheck(cond, ...)                                                                       \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      const int io_check_errno = errno;                                                          \
      throw ::rayless::RuntimeError(::rayless::str(__VA_ARGS__, ": ", ::rayless::os_reason(io_check_errno))); \
    }                                                                                            \
  } while (0)
