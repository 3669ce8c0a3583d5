// What a failure says to the user, in one line: LibTorch's errors without their C++ stack trace, and
// an allocation that failed (c10::OutOfMemoryError, the CPU allocator's "can't allocate memory",
// std::bad_alloc) as "out of memory while PHASE", where PHASE is what the program was doing. Code that
// may allocate much names its phase with a MemoryPhase scope; the top of every command prints
// failure_message(e).
#pragma once
#include <exception>
#include <string>

namespace rayless {

// Names what runs while it is alive ("generation of step 3"); scopes nest, the innermost is named.
// `bounds` says what the phase allocates and which settings bound it ("32 rows x 76 positions, KV
// cache 1.2 MiB; bounded by train.per_device_train_batch_size = 4, ..."), for the message.
class MemoryPhase {
 public:
  explicit MemoryPhase(std::string name, const std::string& bounds = "");
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  std::string previous_;
  int uncaught_;
};

// The innermost phase alive, with its bounds in parentheses ("" when none).
const std::string& memory_phase();

// Whether `error` is a failed allocation.
bool is_out_of_memory(const std::exception& error);

// The one-line message for an error caught at the top of a command.
std::string failure_message(const std::exception& error);

}  // namespace rayless
