#include "rayless/base/failure_message.h"

#include <c10/util/Exception.h>

#include <exception>
#include <new>

#include "rayless/base/error.h"

namespace rayless {
namespace {
std::string& current_phase() {
  static thread_local std::string phase;
  return phase;
}

// LibTorch's message without the "Exception raised from ... frame #0: ..." trace: its first line
std::string without_backtrace(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error ? c10_error->what_without_backtrace() : error.what();
  const size_t end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}
}  // namespace

MemoryPhase::MemoryPhase(std::string name, const std::string& bounds)
    : previous_(std::move(current_phase())), uncaught_(std::uncaught_exceptions()) {
  current_phase() = bounds.empty() ? std::move(name) : str(name, " (", bounds, ")");
}

// Left by an exception, the phase stays: the top of the command names where it happened.
MemoryPhase::~MemoryPhase() {
  if (std::uncaught_exceptions() == uncaught_) current_phase() = std::move(previous_);
}

const std::string& memory_phase() { return current_phase(); }

bool is_out_of_memory(const std::exception& error) {
  if (dynamic_cast<const std::bad_alloc*>(&error) || dynamic_cast<const c10::OutOfMemoryError*>(&error)) return true;
  if (!dynamic_cast<const c10::Error*>(&error)) return false;
  const std::string text = without_backtrace(error);
  // the CPU allocator raises a plain c10::Error
  return text.find("can't allocate memory") != std::string::npos || text.find("not enough memory") != std::string::npos;
}

std::string failure_message(const std::exception& error) {
  if (!is_out_of_memory(error)) return without_backtrace(error);
  const std::string& phase = memory_phase();
  const std::string detail = dynamic_cast<const std::bad_alloc*>(&error) ? std::string("std::bad_alloc") : without_backtrace(error);
  const bool bounded = phase.find("bounded by") != std::string::npos;
  return str("out of memory", phase.empty() ? std::string() : " while " + phase, ": ", detail,
             bounded ? " (lower the settings named, or give each rank more memory; docs/models.md, Lengths and memory)"
                     : " (lower the lengths or the batch, or give each rank more memory; docs/models.md, Lengths and memory)");
}

}  // namespace rayless
