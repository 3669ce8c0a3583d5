// libFuzzer target: one answer line of a reward worker (docs/rewards.md): the first byte picks one
// request or a batch of 1-8; the rest is the line. Malformed answers must come back as "none" (the
// caller turns that into an InputError naming the worker), never as an exception or a crash.
#include "fuzz_input.h"
#include "rayless/rewards/rewards.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool batched = data[0] & 1;
  const size_t count = batched ? 1 + (data[0] >> 1) % 8 : 1;
  const std::string line(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto values = rayless::parse_worker_answer(line, count, batched);
  if (values && values->size() != count) __builtin_trap();  // an answer of the wrong length got through
  return 0;
}
