// Small helpers the Trainer's files share (private to src/trainer).
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "rayless/agent/agent_rollout.h"
#include "rayless/base/error.h"
#include "rayless/base/hash.h"
#include "rayless/ops/autocast_scope.h"
#include "rayless/sampler/sampler.h"

namespace rayless::trainer_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "1.2": a duration for a log line
inline std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

// Every random stream derives from (seed, rank, generation step, purpose), so nothing random needs
// saving: a resumed run re-creates the same streams.
inline torch::Generator stream_generator(int64_t seed, int64_t rank, int64_t generation_step, const char* purpose) {
  const std::string key = str(seed, "/", rank, "/", generation_step, "/", purpose);
  return at::detail::createCPUGenerator(fnv1a64(key.data(), key.size()) & 0x7fffffffffffffffULL);
}

// The sampler's rows as per-row token lists (cut after the first EOS), with its log-probs and
// entropies: a first turn for the tool loop (trainer_agent.cpp).
TurnOutput turn_output(const GenerationOutput& out);

}  // namespace rayless::trainer_detail
