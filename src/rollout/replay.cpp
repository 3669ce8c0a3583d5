#include "rayless/rollout/replay.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "rayless/base/error.h"

namespace rayless {
namespace {

std::vector<std::vector<int64_t>> id_lists(const nlohmann::json& value, const std::string& where, const char* key) {
  inputCheck(value.is_array(), where, ": \"", key, "\" must be a list of lists of token ids");
  std::vector<std::vector<int64_t>> out;
  for (const auto& row : value) {
    inputCheck(row.is_array(), where, ": \"", key, "\" must be a list of lists of token ids");
    std::vector<int64_t> ids;
    for (const auto& id : row) {
      inputCheck(id.is_number_integer() && id.get<int64_t>() >= 0, where, ": \"", key,
                 "\" holds something that is not a token id: ", id.dump());
      ids.push_back(id.get<int64_t>());
    }
    out.push_back(std::move(ids));
  }
  return out;
}

}  // namespace

ReplaySource::ReplaySource(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  inputCheck(in.good(), path, ": cannot open the replay file (train.replay_rollouts)");
  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str(path, ":", line);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      throw InputError(str(where, ": not valid JSON"));
    }
    inputCheck(j.is_object(), where, ": expected a JSON object");
    for (const char* key : {"step", "rank"})
      inputCheck(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() >= 0, where,
                 ": \"", key, "\" must be an integer >= 0");
    inputCheck(j.contains("rows") && j["rows"].is_array(), where, ": \"rows\" must be a list of dataset rows");
    inputCheck(j.contains("completion_ids") || j.contains("completion_turns"), where,
               ": \"completion_ids\" is missing (or \"completion_turns\", the model's turns of a tool-calling run)");
    ReplayedGeneration g;
    g.where = where;
    g.rows = j["rows"].get<std::vector<nlohmann::json>>();
    const size_t n = g.rows.size();
    inputCheck(n > 0, where, ": \"rows\" is empty");
    if (j.contains("completion_ids")) {
      g.completion_ids = id_lists(j["completion_ids"], where, "completion_ids");
      inputCheck(g.completion_ids.size() == n, where, ": ", g.completion_ids.size(), " completion_ids for ", n, " rows");
      for (size_t i = 0; i < n; ++i)
        inputCheck(!g.completion_ids[i].empty(), where, ": completion ", i, " is empty");
    }
    if (j.contains("completion_turns")) {
      const auto& turns = j["completion_turns"];
      inputCheck(turns.is_array() && turns.size() == n, where, ": \"completion_turns\" must hold one list of turns per row (",
                 n, " rows)");
      for (size_t i = 0; i < n; ++i) {
        g.completion_turns.push_back(id_lists(turns[i], where, "completion_turns"));
        inputCheck(!g.completion_turns.back().empty() && !g.completion_turns.back().front().empty(), where,
                   ": completion_turns of row ", i, " has no first turn");
      }
    }
    if (j.contains("tool_mask")) {
      inputCheck(!g.completion_ids.empty() && g.completion_turns.empty(), where,
                 ": \"tool_mask\" goes with \"completion_ids\" (with \"completion_turns\" rayless runs the tools and "
                 "masks their tokens itself)");
      const auto masks = id_lists(j["tool_mask"], where, "tool_mask");
      inputCheck(masks.size() == n, where, ": ", masks.size(), " tool_mask lists for ", n, " rows");
      for (size_t i = 0; i < n; ++i) {
        inputCheck(masks[i].size() == g.completion_ids[i].size(), where, ": tool_mask of row ", i, " has ",
                   masks[i].size(), " entries for ", g.completion_ids[i].size(), " completion tokens");
        for (int64_t v : masks[i]) inputCheck(v == 0 || v == 1, where, ": tool_mask of row ", i, " holds ", v, " (0 or 1)");
      }
      g.tool_mask = masks;
    }
    if (j.contains("prompt_ids")) {
      g.prompt_ids = id_lists(j["prompt_ids"], where, "prompt_ids");
      inputCheck(g.prompt_ids.size() == n, where, ": ", g.prompt_ids.size(), " prompt_ids for ", n, " rows");
    }
    if (j.contains("shuffle")) {
      const auto& s = j["shuffle"];
      inputCheck(s.is_array() && s.size() == n, where, ": \"shuffle\" must list ", n, " row indices");
      std::vector<char> seen(n, 0);
      for (const auto& v : s) {
        inputCheck(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<size_t>() < n && !seen[v.get<size_t>()],
                   where, ": \"shuffle\" is not a permutation of 0..", n - 1);
        seen[v.get<size_t>()] = 1;
        g.shuffle.push_back(v.get<int64_t>());
      }
    }
    if (j.contains("logprobs")) {
      const auto& lp = j["logprobs"];
      inputCheck(lp.is_array() && lp.size() == n, where, ": \"logprobs\" must list ", n, " rows of log-probs");
      for (size_t i = 0; i < n; ++i) {
        inputCheck(lp[i].is_array() && lp[i].size() == g.completion_ids[i].size(), where, ": \"logprobs\" row ", i,
                   " must have one value per completion token (", g.completion_ids[i].size(), ")");
        std::vector<double> row;
        for (const auto& v : lp[i]) {
          inputCheck(v.is_null() || v.is_number(), where, ": \"logprobs\" row ", i, " holds ", v.dump(),
                     ", not a number or null");
          row.push_back(v.is_null() ? std::nan("") : v.get<double>());
        }
        g.logprobs.push_back(std::move(row));
      }
    }
    inputCheck(generations_.empty() || has_logprobs_ == !g.logprobs.empty(), where, ": ",
               g.logprobs.empty() ? "no \"logprobs\", but earlier lines have them" : "\"logprobs\", but earlier lines have none",
               ": give them on every line or on none");
    has_logprobs_ = !g.logprobs.empty();
    const auto key = std::make_pair(j["step"].get<int64_t>(), j["rank"].get<int64_t>());
    inputCheck(!generations_.count(key), where, ": step ", key.first, " rank ", key.second, " appears twice");
    generations_.emplace(key, std::move(g));
  }
  inputCheck(!generations_.empty(), path, ": no replayed generation in ", line, " lines");
}

const ReplayedGeneration& ReplaySource::at(int64_t step, int64_t rank) const {
  auto it = generations_.find({step, rank});
  inputCheck(it != generations_.end(), path_, ": no line for generation step ", step, " rank ", rank,
             " (train.replay_rollouts must cover every generation of the run)");
  return it->second;
}

}  // namespace rayless
