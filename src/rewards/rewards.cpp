// Built-in reward functions and the RewardSet that runs them.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "rayless/rewards/rewards.h"

#include <future>

#include "rayless/rewards/reward_model.h"

#include <pcre2.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <unordered_set>

#include "rayless/base/config.h"
#include "rayless/base/error.h"

namespace rayless {
namespace {

int64_t count_code_points(const std::string& text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // count every byte that starts a character
  return n;
}

// Invalid UTF-8 (a completion cut inside a multi-byte character) becomes U+FFFD, so PCRE2 in UTF
// mode can match it instead of failing.
std::string valid_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = length > 0 && i + length <= text.size() && !(length == 2 && c < 0xC2);
    for (size_t k = 1; ok && k < length; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (ok && length == 3) {  // no overlong forms, no surrogates
      const unsigned char d = static_cast<unsigned char>(text[i + 1]);
      ok = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);
    }
    if (ok && length == 4) {
      const unsigned char d = static_cast<unsigned char>(text[i + 1]);
      ok = c <= 0xF4 && !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90);
    }
    if (ok) {
      out.append(text, i, length);
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string trim(const std::string& s) {
  const char* space = " \t\r\n\f\v";
  const size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

// Numbers as written in answers: optional sign, digits with optional thousands commas, optional
// fraction and exponent. Returns every number found, in order.
std::vector<double> numbers_in(const std::string& text) {
  std::vector<double> out;
  size_t i = 0;
  while (i < text.size()) {
    const bool sign = (text[i] == '-' || text[i] == '+') && i + 1 < text.size() &&
                      (std::isdigit(static_cast<unsigned char>(text[i + 1])) || text[i + 1] == '.');
    const size_t start = i;
    size_t j = sign ? i + 1 : i;
    if (j >= text.size() || !(std::isdigit(static_cast<unsigned char>(text[j])) ||
                              (text[j] == '.' && j + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[j + 1]))))) {
      ++i;
      continue;
    }
    std::string digits = sign ? std::string(1, text[i]) : std::string();
    while (j < text.size()) {
      const char c = text[j];
      if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
        digits += c;
      } else if (c == ',' && j + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[j + 1])) &&
                 digits.find('.') == std::string::npos) {
        // thousands separator: 1,234
      } else if ((c == 'e' || c == 'E') && j + 1 < text.size() &&
                 (std::isdigit(static_cast<unsigned char>(text[j + 1])) ||
                  ((text[j + 1] == '-' || text[j + 1] == '+') && j + 2 < text.size() &&
                   std::isdigit(static_cast<unsigned char>(text[j + 2]))))) {
        digits += c;
        digits += text[++j];
      } else {
        break;
      }
      ++j;
    }
    while (!digits.empty() && digits.back() == '.') digits.pop_back();  // "42." ends a sentence
    char* end = nullptr;
    const double value = std::strtod(digits.c_str(), &end);
    if (end != digits.c_str()) out.push_back(value);
    i = std::max(j, start + 1);
  }
  return out;
}

class LengthReward : public RewardFunction {
 public:
  LengthReward(int64_t target, LengthUnit unit) : target_(target), unit_(unit) {}
  std::string name() const override { return "length"; }
  std::vector<double> score(const std::vector<std::string>&, const std::vector<std::string>& completions,
                            const std::vector<int64_t>& token_counts, const std::vector<nlohmann::json>&) override {
    std::vector<double> out(completions.size());
    for (size_t i = 0; i < completions.size(); ++i)
      out[i] = length_reward(completions[i], token_counts[i], target_, unit_);
    return out;
  }

 private:
  int64_t target_;
  LengthUnit unit_;
};

class FormatReward : public RewardFunction {
 public:
  explicit FormatReward(const std::string& pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(), PCRE2_UTF, &error_code,
                          &error_offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof message);
      throw InputError(str("reward.format_pattern = \"", pattern, "\": bad regex at offset ", error_offset, ": ",
                           reinterpret_cast<const char*>(message)));
    }
    match_data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~FormatReward() override {
    pcre2_match_data_free(match_data_);
    pcre2_code_free(code_);
  }
  std::string name() const override { return "format"; }
  std::vector<double> score(const std::vector<std::string>&, const std::vector<std::string>& completions,
                            const std::vector<int64_t>&, const std::vector<nlohmann::json>&) override {
    std::vector<double> out(completions.size());
    for (size_t i = 0; i < completions.size(); ++i) {
      const std::string text = valid_utf8(completions[i]);
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                                 PCRE2_NO_UTF_CHECK, match_data_, nullptr);
      out[i] = rc >= 0 ? 1.0 : 0.0;
    }
    return out;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* match_data_ = nullptr;
};

class AnswerReward : public RewardFunction {
 public:
  AnswerReward(std::string field, AnswerMode mode) : field_(std::move(field)), mode_(mode) {}
  std::string name() const override { return "answer"; }
  std::vector<double> score(const std::vector<std::string>&, const std::vector<std::string>& completions,
                            const std::vector<int64_t>&, const std::vector<nlohmann::json>& rows) override {
    std::vector<double> out(completions.size());
    for (size_t i = 0; i < completions.size(); ++i)
      out[i] = answer_reward(completions[i], answer_text(rows[i], field_), mode_);
    return out;
  }
  std::string check_row(const nlohmann::json& row) const override {
    auto it = row.is_object() ? row.find(field_) : row.end();
    if (it == row.end() || it->is_null())
      return str("no field \"", field_, "\" for the answer reward (reward.answer_field)");
    return "";
  }

 private:
  std::string field_;
  AnswerMode mode_;
};

class RepetitionPenalty : public RewardFunction {
 public:
  explicit RepetitionPenalty(int64_t ngram) : ngram_(ngram) {}
  std::string name() const override { return "repetition"; }
  std::vector<double> score(const std::vector<std::string>&, const std::vector<std::string>& completions,
                            const std::vector<int64_t>&, const std::vector<nlohmann::json>&) override {
    std::vector<double> out(completions.size());
    for (size_t i = 0; i < completions.size(); ++i) out[i] = repetition_penalty(completions[i], ngram_);
    return out;
  }

 private:
  int64_t ngram_;
};

}  // namespace

double length_reward(const std::string& completion, int64_t token_count, int64_t target, LengthUnit unit) {
  const int64_t length = unit == LengthUnit::Chars ? count_code_points(completion) : token_count;
  return -std::fabs(static_cast<double>(target - length));
}

double repetition_penalty(const std::string& completion, int64_t ngram) {
  std::vector<std::string> words;
  std::string word;
  for (char c : completion) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!word.empty()) words.push_back(std::move(word)), word.clear();
    } else {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  if (static_cast<int64_t>(words.size()) < ngram) return 0.0;
  std::set<std::vector<std::string>> distinct;
  int64_t total = 0;
  for (size_t i = 0; i + ngram <= words.size(); ++i, ++total)
    distinct.insert(std::vector<std::string>(words.begin() + i, words.begin() + i + ngram));
  return -(1.0 - static_cast<double>(distinct.size()) / static_cast<double>(total));
}

double answer_reward(const std::string& completion, const std::string& expected, AnswerMode mode) {
  if (mode == AnswerMode::Exact) return trim(completion) == trim(expected) ? 1.0 : 0.0;
  const std::vector<double> want = numbers_in(expected);
  const std::vector<double> got = numbers_in(completion);
  if (want.empty() || got.empty()) return 0.0;
  const double a = got.back(), b = want.back();
  return std::fabs(a - b) <= 1e-6 * std::max({1.0, std::fabs(a), std::fabs(b)}) ? 1.0 : 0.0;
}

std::string answer_text(const nlohmann::json& row, const std::string& field) {
  auto it = row.is_object() ? row.find(field) : row.end();
  inputCheck(row.is_object() && it != row.end() && !it->is_null(), "answer reward: dataset row has no field \"",
             field, "\" (reward.answer_field)");
  return it->is_string() ? it->get<std::string>() : it->dump();
}

RewardSet::RewardSet(const Config& config, int rank, torch::Device device, torch::Dtype dtype) {
  validate_config(config);  // the names, weights, patterns, commands and tables: config.cpp's rule table
  const RewardConfig& r = config.reward;
  for (const std::string& name : r.functions) {
    if (name == "length") {
      functions_.push_back(std::make_unique<LengthReward>(r.length_target, r.length_unit));
    } else if (name == "format") {
      functions_.push_back(std::make_unique<FormatReward>(r.format_pattern));
    } else if (name == "answer") {
      functions_.push_back(std::make_unique<AnswerReward>(r.answer_field, r.answer_mode));
    } else if (name == "repetition") {
      functions_.push_back(std::make_unique<RepetitionPenalty>(r.repetition_ngram));
    } else if (name == "worker") {
      functions_.push_back(
          std::make_unique<RewardWorker>(r.worker_command, r.worker_timeout_s, r.worker_batch_size, rank));
    } else if (auto w = r.workers.find(name); w != r.workers.end()) {
      functions_.push_back(std::make_unique<RewardWorker>(w->second.command, w->second.timeout_s, w->second.batch_size,
                                                          rank, name));
    } else {  // the rules allow no other name than a [reward.models.NAME]
      const RewardModelConfig& m = r.models.at(name);
      auto model = std::make_unique<RewardModel>(name, m.path, m.tokenizer, m.batch_size, device,
                                                 dtype == torch::kFloat64 ? torch::kFloat64 : dtype);
      model->set_conversation_format(config.data.prompt_field, config.data.messages_field, m.chat_template,
                                     nlohmann::ordered_json::parse(config.tokenizer.chat_template_kwargs));
      functions_.push_back(std::move(model));
    }
    names_.push_back(functions_.back()->name());
  }
  weights_ = r.reward_weights.empty() ? std::vector<double>(functions_.size(), 1.0) : r.reward_weights;
}

RewardSet::~RewardSet() = default;

void RewardSet::add(std::unique_ptr<RewardFunction> function, double weight) {
  names_.push_back(function->name());
  functions_.push_back(std::move(function));
  weights_.push_back(weight);
}

std::string RewardSet::check_row(const nlohmann::json& row) const {
  for (const auto& function : functions_)
    if (std::string why = function->check_row(row); !why.empty()) return why;
  return "";
}

torch::Tensor RewardSet::score(const std::vector<std::string>& prompts, const std::vector<std::string>& completions,
                               const std::vector<int64_t>& completion_token_counts,
                               const std::vector<nlohmann::json>& rows, std::vector<NonfiniteScore>* nonfinite) {
  const size_t n = completions.size();
  runtimeCheck(prompts.size() == n && completion_token_counts.size() == n && rows.size() == n,
               "RewardSet::score: ", prompts.size(), " prompts, ", n, " completions, ", completion_token_counts.size(),
               " token counts and ", rows.size(), " rows must agree");
  torch::Tensor out = torch::empty({static_cast<int64_t>(n), static_cast<int64_t>(functions_.size())}, torch::kFloat64);
  auto acc = out.accessor<double, 2>();
  // workers (separate processes, waiting on pipes) answer at the same time; the rest run here meanwhile
  std::vector<std::future<std::vector<double>>> pending(functions_.size());
  for (size_t k = 0; k < functions_.size(); ++k)
    if (functions_[k]->runs_apart())
      pending[k] = std::async(std::launch::async, [&, k] {
        return functions_[k]->score(prompts, completions, completion_token_counts, rows);
      });
  std::exception_ptr first_error;
  for (size_t k = 0; k < functions_.size(); ++k) {
    std::vector<double> scores;
    try {
      scores = pending[k].valid() ? pending[k].get() : functions_[k]->score(prompts, completions, completion_token_counts, rows);
    } catch (...) {
      if (!first_error) first_error = std::current_exception();  // still collect the others before leaving
      continue;
    }
    runtimeCheck(scores.size() == n, "reward ", names_[k], " returned ", scores.size(), " scores for ", n, " completions");
    for (size_t i = 0; i < n; ++i) {
      acc[i][k] = std::isfinite(scores[i]) ? scores[i] : std::numeric_limits<double>::quiet_NaN();
      if (nonfinite && std::isinf(scores[i])) nonfinite->push_back({static_cast<int64_t>(i), k, scores[i]});
    }
  }
  if (first_error) std::rethrow_exception(first_error);
  return out;
}

}  // namespace rayless
