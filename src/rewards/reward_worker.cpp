// External reward workers: one long-running process per rank (base/worker_process.h) answering
// JSON lines with scores.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "rayless/base/error.h"
#include "rayless/rewards/rewards.h"

namespace rayless {
namespace {

double reward_value(const nlohmann::ordered_json& value, bool* ok) {
  *ok = true;
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (value.is_number()) return value.get<double>();
  if (value.is_boolean()) return value.get<bool>() ? 1.0 : 0.0;
  *ok = false;
  return 0;
}

}  // namespace

std::optional<std::vector<double>> parse_worker_answer(const std::string& line, size_t count, bool batched) {
  const std::optional<nlohmann::ordered_json> parsed = parse_answer_line(line);
  if (!parsed) return std::nullopt;
  const nlohmann::ordered_json& answer = *parsed;
  std::vector<double> values(count);
  bool ok = answer.is_object();
  if (ok && !batched) {
    ok = count == 1 && answer.contains("reward");
    if (ok) values[0] = reward_value(answer["reward"], &ok);
  } else if (ok) {
    ok = answer.contains("rewards") && answer["rewards"].is_array() && answer["rewards"].size() == count;
    for (size_t i = 0; ok && i < count; ++i) values[i] = reward_value(answer["rewards"][i], &ok);
  }
  if (!ok) return std::nullopt;
  return values;
}

RewardWorker::RewardWorker(std::string command, double timeout_s, int64_t batch_size, int rank, std::string name)
    : name_(std::move(name)),
      batch_size_(batch_size),
      process_(command, timeout_s, rank, str("reward worker \"", name_, "\" (", command, ")")) {}

RewardWorker::~RewardWorker() = default;

std::vector<double> RewardWorker::score(const std::vector<std::string>& prompts,
                                        const std::vector<std::string>& completions, const std::vector<int64_t>&,
                                        const std::vector<nlohmann::json>& rows) {
  const size_t n = completions.size();
  std::vector<nlohmann::json> requests(n);
  for (size_t i = 0; i < n; ++i) {
    nlohmann::json request = nlohmann::json::object();
    if (rows[i].is_object())
      for (auto it = rows[i].begin(); it != rows[i].end(); ++it) request[it.key()] = it.value();
    request["prompt"] = prompts[i];
    request["completion"] = completions[i];
    requests[i] = std::move(request);
  }
  // invalid UTF-8 (a completion cut inside a character) is replaced, never an exception
  const auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
  const auto garbage = [&](size_t request, const std::string& line, const std::string& expected) {
    process_.stop();
    return InputError(str(process_.who(), " answered request ", request + 1, " with \"", one_line_excerpt(line),
                          "\": expected ", expected));
  };
  std::vector<double> out(n);
  if (batch_size_ <= 0) {
    std::vector<std::string> lines(n);
    for (size_t i = 0; i < n; ++i) lines[i] = dump(requests[i]) + "\n";
    const std::vector<std::string> answers = process_.exchange(lines);
    for (size_t i = 0; i < n; ++i) {
      const auto values = parse_worker_answer(answers[i], 1, /*batched=*/false);
      if (!values) throw garbage(i, answers[i], "one JSON object {\"reward\": number|null}");
      out[i] = (*values)[0];
    }
    return out;
  }
  std::vector<std::string> lines;
  std::vector<size_t> starts;
  for (size_t start = 0; start < n; start += static_cast<size_t>(batch_size_)) {
    const size_t end = std::min(n, start + static_cast<size_t>(batch_size_));
    nlohmann::json batch = nlohmann::json::array();
    for (size_t i = start; i < end; ++i) batch.push_back(requests[i]);
    lines.push_back(dump(nlohmann::json{{"batch", batch}}) + "\n");
    starts.push_back(start);
  }
  const std::vector<std::string> answers = process_.exchange(lines);
  for (size_t b = 0; b < lines.size(); ++b) {
    const size_t start = starts[b], count = std::min(n, start + static_cast<size_t>(batch_size_)) - start;
    const auto values = parse_worker_answer(answers[b], count, /*batched=*/true);
    if (!values) throw garbage(b, answers[b], str("one JSON object {\"rewards\": [", count, " numbers|null]}"));
    std::copy(values->begin(), values->end(), out.begin() + static_cast<std::ptrdiff_t>(start));
  }
  return out;
}

}  // namespace rayless
