// CUDA graphs of the generation engine's decode step (generation_engine.h), one per slot bucket. The
// step's shapes are fixed for a bucket (its slot count, the whole cache length), all its state lives
// in device tensors updated in place, and its randomness is the uniform table uploaded once per
// generation, so a graph captured once replays every later step of that bucket with no host work.
// Compiled with CUDA only (RAYLESS_CUDA_GRAPHS): elsewhere available() is false and run() calls the
// step directly.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace rayless {

class DecodeGraphs {
 public:
  // Whether this build captures CUDA graphs (built against a CUDA LibTorch).
  static bool available();
  explicit DecodeGraphs(const torch::Device& device);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;
  // One step of bucket `slots`: the first time `step` runs eagerly (the token it computes is a real
  // one) and is then captured without running; later calls replay the capture. `step` must do device
  // work only, on the same tensors every time.
  void run(int64_t slots, const std::function<void()>& step);
  int64_t captured() const;  // graphs captured so far
  int64_t replays() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rayless
