// The values of the config's choice keys, parsed once into enums: TOML names them as text, the code
// downstream takes the enum. choice_names<E>() is the one table of names per enum (config loading,
// `config show`, the docs, error messages and the reference-case readers all use it).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace rayless {

enum class LossType { Grpo, Bnpo, DrGrpo, Dapo, Cispo, Sapo, Luspo };             // grpo.loss_type
enum class ScaleRewards { Group, Batch, None };                                     // grpo.scale_rewards
enum class RewardAggregation { SumThenNormalize, NormalizeThenSum };                // grpo.multi_objective_aggregation
enum class ImportanceSamplingLevel { Token, Sequence };                             // grpo.importance_sampling_level
enum class EntropyThresholdMethod { Gather, Select };                               // grpo.entropy_threshold_method
enum class ImportanceSamplingMode { TokenTruncate, TokenMask, SequenceTruncate, SequenceMask };  // grpo.vllm_importance_sampling_mode
enum class WeightSyncDtype { Model, BFloat16 };                                     // distributed.weight_sync_dtype
enum class DeviceChoice { Auto, Cpu, Cuda };                                        // model.device
enum class ModelDtype { Float32, BFloat16, Float16, Float64 };                      // model.dtype
enum class PromptTruncation { Error, Left };                                        // data.truncation
enum class LengthUnit { Tokens, Chars };                                            // reward.length_unit
enum class AnswerMode { Exact, Numeric };                                           // reward.answer_mode
enum class LrSchedule { Constant, Linear, Cosine };                                 // optim.lr_scheduler_type
enum class LogLevel { Debug, Info, Warn };                                          // log.level

// Every value of E with its TOML name, in the order the docs list them.
template <typename E>
const std::vector<std::pair<E, std::string>>& choice_names();

#define RAYLESS_DECLARE_CHOICES(E) \
  template <>                      \
  const std::vector<std::pair<E, std::string>>& choice_names<E>();
RAYLESS_DECLARE_CHOICES(LossType)
RAYLESS_DECLARE_CHOICES(ScaleRewards)
RAYLESS_DECLARE_CHOICES(RewardAggregation)
RAYLESS_DECLARE_CHOICES(ImportanceSamplingLevel)
RAYLESS_DECLARE_CHOICES(EntropyThresholdMethod)
RAYLESS_DECLARE_CHOICES(ImportanceSamplingMode)
RAYLESS_DECLARE_CHOICES(WeightSyncDtype)
RAYLESS_DECLARE_CHOICES(DeviceChoice)
RAYLESS_DECLARE_CHOICES(ModelDtype)
RAYLESS_DECLARE_CHOICES(PromptTruncation)
RAYLESS_DECLARE_CHOICES(LengthUnit)
RAYLESS_DECLARE_CHOICES(AnswerMode)
RAYLESS_DECLARE_CHOICES(LrSchedule)
RAYLESS_DECLARE_CHOICES(LogLevel)
#undef RAYLESS_DECLARE_CHOICES

template <typename E>
std::string choice_name(E value) {
  for (const auto& [v, name] : choice_names<E>())
    if (v == value) return name;
  return "?";
}

// "a | b | c"
template <typename E>
std::string choice_list() {
  std::string out;
  for (const auto& [v, name] : choice_names<E>()) out += (out.empty() ? "" : " | ") + name;
  return out;
}

// The value named `text`; an InputError naming `key`, the text and the allowed names otherwise.
template <typename E>
E parse_choice(const std::string& text, const std::string& key);

}  // namespace rayless
