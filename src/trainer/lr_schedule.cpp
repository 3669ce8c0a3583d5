#include "rayless/trainer/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "rayless/base/config.h"
#include "rayless/base/error.h"

namespace rayless {

int64_t warmup_steps_for(const OptimConfig& optim, int64_t max_steps) {
  if (optim.warmup_steps > 0) return optim.warmup_steps;
  return static_cast<int64_t>(std::ceil(optim.warmup_ratio * static_cast<double>(max_steps)));
}

double lr_multiplier(LrSchedule type, int64_t step, int64_t warmup_steps, int64_t max_steps) {
  if (step < warmup_steps) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
  if (type == LrSchedule::Constant) return 1.0;
  const double remaining = static_cast<double>(max_steps - step);
  const double span = static_cast<double>(std::max<int64_t>(1, max_steps - warmup_steps));
  if (type == LrSchedule::Linear) return std::max(0.0, remaining / span);
  const double progress = static_cast<double>(step - warmup_steps) / span;  // cosine
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace rayless
