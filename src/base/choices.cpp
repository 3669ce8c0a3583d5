#include "rayless/base/choices.h"

#include "rayless/base/error.h"

namespace rayless {

#define RAYLESS_CHOICES(E, ...)                                             \
  template <>                                                               \
  const std::vector<std::pair<E, std::string>>& choice_names<E>() {         \
    static const std::vector<std::pair<E, std::string>> names = __VA_ARGS__; \
    return names;                                                           \
  }                                                                         \
  template E parse_choice<E>(const std::string&, const std::string&);

template <typename E>
E parse_choice(const std::string& text, const std::string& key) {
  for (const auto& [value, name] : choice_names<E>())
    if (name == text) return value;
  throw InputError(str(key, ": unknown value \"", text, "\" (", choice_list<E>(), ")"));
}

RAYLESS_CHOICES(LossType, {{LossType::Grpo, "grpo"}, {LossType::Bnpo, "bnpo"}, {LossType::DrGrpo, "dr_grpo"},
                           {LossType::Dapo, "dapo"}, {LossType::Cispo, "cispo"}, {LossType::Sapo, "sapo"},
                           {LossType::Luspo, "luspo"}})
RAYLESS_CHOICES(ScaleRewards, {{ScaleRewards::Group, "group"}, {ScaleRewards::Batch, "batch"}, {ScaleRewards::None, "none"}})
RAYLESS_CHOICES(RewardAggregation, {{RewardAggregation::SumThenNormalize, "sum_then_normalize"},
                                    {RewardAggregation::NormalizeThenSum, "normalize_then_sum"}})
RAYLESS_CHOICES(ImportanceSamplingLevel, {{ImportanceSamplingLevel::Token, "token"}, {ImportanceSamplingLevel::Sequence, "sequence"}})
RAYLESS_CHOICES(EntropyThresholdMethod, {{EntropyThresholdMethod::Gather, "gather"}, {EntropyThresholdMethod::Select, "select"}})
RAYLESS_CHOICES(ImportanceSamplingMode, {{ImportanceSamplingMode::TokenTruncate, "token_truncate"},
                                         {ImportanceSamplingMode::TokenMask, "token_mask"},
                                         {ImportanceSamplingMode::SequenceTruncate, "sequence_truncate"},
                                         {ImportanceSamplingMode::SequenceMask, "sequence_mask"}})
RAYLESS_CHOICES(WeightSyncDtype, {{WeightSyncDtype::Model, "model"}, {WeightSyncDtype::BFloat16, "bfloat16"}})
RAYLESS_CHOICES(DeviceChoice, {{DeviceChoice::Auto, "auto"}, {DeviceChoice::Cpu, "cpu"}, {DeviceChoice::Cuda, "cuda"}})
RAYLESS_CHOICES(ModelDtype, {{ModelDtype::Float32, "float32"}, {ModelDtype::BFloat16, "bfloat16"},
                             {ModelDtype::Float16, "float16"}, {ModelDtype::Float64, "float64"}})
RAYLESS_CHOICES(PromptTruncation, {{PromptTruncation::Error, "error"}, {PromptTruncation::Left, "left"}})
RAYLESS_CHOICES(LengthUnit, {{LengthUnit::Tokens, "tokens"}, {LengthUnit::Chars, "chars"}})
RAYLESS_CHOICES(AnswerMode, {{AnswerMode::Exact, "exact"}, {AnswerMode::Numeric, "numeric"}})
RAYLESS_CHOICES(LrSchedule, {{LrSchedule::Constant, "constant"}, {LrSchedule::Linear, "linear"}, {LrSchedule::Cosine, "cosine"}})
RAYLESS_CHOICES(LogLevel, {{LogLevel::Debug, "debug"}, {LogLevel::Info, "info"}, {LogLevel::Warn, "warn"}})

#undef RAYLESS_CHOICES

}  // namespace rayless
