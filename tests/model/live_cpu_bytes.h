// LiveCpuBytes: the bytes of CPU tensor storage allocated and not yet freed since it was made, by a
// counting allocator put in front of LibTorch's CPU allocator for its lifetime. What a forward pass
// leaves alive for backward is then measurable without timing or RSS.
#pragma once
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>

namespace rayless::test {

class LiveCpuBytes {
 public:
  LiveCpuBytes() : base_(c10::GetCPUAllocator()) {
    if (base_ == &counter()) throw std::logic_error("LiveCpuBytes: one at a time");
    counter().base = base_;
    counter().live = 0;
    c10::SetCPUAllocator(&counter(), kPriority);
  }
  ~LiveCpuBytes() { c10::SetCPUAllocator(base_, kPriority); }
  LiveCpuBytes(const LiveCpuBytes&) = delete;
  LiveCpuBytes& operator=(const LiveCpuBytes&) = delete;

  int64_t live() const { return counter().live.load(); }

 private:
  static constexpr uint8_t kPriority = 100;  // above LibTorch's own registrations

  // One per process: storage it allocated may be freed after the LiveCpuBytes is gone.
  struct Counter : c10::Allocator {
    c10::Allocator* base = nullptr;
    std::atomic<int64_t> live{0};

    struct Held {
      c10::DataPtr inner;
      int64_t bytes;
    };
    static void release(void* context) {
      auto* held = static_cast<Held*>(context);
      counter().live -= held->bytes;
      delete held;
    }
    c10::DataPtr allocate(size_t n) override {
      c10::DataPtr inner = base->allocate(n);
      void* data = inner.get();
      const c10::Device device = inner.device();
      live += static_cast<int64_t>(n);
      return {data, new Held{std::move(inner), static_cast<int64_t>(n)}, &release, device};
    }
    void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  };
  static Counter& counter() {
    static Counter instance;
    return instance;
  }

  c10::Allocator* base_;
};

}  // namespace rayless::test
