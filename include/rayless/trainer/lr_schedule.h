// Learning-rate schedules with linear warmup, as transformers' get_scheduler computes them (TRL uses
// those): the multiplier of the peak learning rate for optimizer step `step` (0-based, before it runs).
#pragma once
#include <cstdint>
#include <string>

#include "rayless/base/choices.h"

namespace rayless {

struct OptimConfig;

// warmup_steps > 0 wins; else ceil(warmup_ratio * max_steps).
int64_t warmup_steps_for(const OptimConfig& optim, int64_t max_steps);
// type: constant | linear | cosine. linear decays to 0 at max_steps; cosine follows half a cosine.
double lr_multiplier(LrSchedule type, int64_t step, int64_t warmup_steps, int64_t max_steps);

}  // namespace rayless
