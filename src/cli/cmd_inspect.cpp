// rayless inspect PATH: what a run generated, read back from the rollout store. PATH is index.h5, a
// rank file, a step file, a rollouts/ directory or a run directory. Default: one summary line per
// step; --show K prints decoded prompts and completions with high-entropy tokens marked; --export
// writes one row per completion (jsonl | csv); --histogram entropies draws the entropy distribution.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "rayless/base/files.h"
#include "rayless/base/log.h"
#include "rayless/rollout/rollout_store.h"
#include "rayless/hf/tokenizer.h"

namespace fs = std::filesystem;

namespace rayless::cli {
namespace {

struct Loaded {
  RolloutEntry entry;
  Rollouts rollouts;
  RolloutAttrs attrs;
};

double nan_mean(const torch::Tensor& x) {
  const torch::Tensor v = x.to(torch::kFloat64).masked_select(~x.to(torch::kFloat64).isnan());
  return v.numel() ? v.mean().item<double>() : std::nan("");
}
double nan_std(const torch::Tensor& x) {  // sample std like torch.std / TRL's nanstd
  const torch::Tensor v = x.to(torch::kFloat64).masked_select(~x.to(torch::kFloat64).isnan());
  return v.numel() > 1 ? v.std().item<double>() : std::nan("");
}

std::string fixed(double v, int digits = 4) {
  if (std::isnan(v)) return "nan";
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << v;
  return out.str();
}

torch::Tensor lengths_of(const Rollouts& r) {
  return r.completion_offsets.slice(0, 1) - r.completion_offsets.slice(0, 0, r.size());
}

// Fraction of prompt groups whose rewards all agree (std 0): they carry no learning signal.
double zero_std_group_fraction(const std::vector<const Loaded*>& parts) {
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> groups;  // (rank, group) -> rewards
  for (const Loaded* l : parts) {
    const torch::Tensor rewards = l->rollouts.rewards.to(torch::kFloat64);
    for (int64_t i = 0; i < l->rollouts.size(); ++i)
      groups[{l->entry.rank, l->rollouts.group_index[i].item<int64_t>()}].push_back(rewards[i].item<double>());
  }
  if (groups.empty()) return std::nan("");
  int64_t zero = 0;
  for (const auto& [key, values] : groups) {
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    zero += (*hi - *lo) == 0.0;
  }
  return static_cast<double>(zero) / static_cast<double>(groups.size());
}

std::shared_ptr<Tokenizer> try_tokenizer(const std::string& override_path, const RolloutAttrs& attrs,
                                         const std::string& store_path) {
  std::string path = override_path.empty() ? attrs.tokenizer : override_path;
  if (path.empty()) return nullptr;
  try {
    std::shared_ptr<Tokenizer> tokenizer;
    if (path != "byte" && !fs::exists(path)) {
      // a relative path was relative to the training run's working directory: try next to the run
      for (fs::path dir = fs::absolute(store_path).parent_path(); !dir.empty() && dir != dir.root_path();
           dir = dir.parent_path())
        if (fs::exists(dir / path)) {
          path = (dir / path).string();
          break;
        }
    }
    tokenizer = load_tokenizer(path);
    if (!attrs.tokenizer_hash.empty() && tokenizer->hash() != attrs.tokenizer_hash)
      log_warn(str("inspect: tokenizer ", path, " has hash ", tokenizer->hash(), " but the rollouts were made with ",
                   attrs.tokenizer_hash, ": decoded text may be wrong"));
    return tokenizer;
  } catch (const std::exception& e) {
    log_warn(str("inspect: cannot load tokenizer \"", path, "\" (", e.what(), "): printing token ids"));
    return nullptr;
  }
}

std::vector<int64_t> ids_of(const torch::Tensor& flat, const torch::Tensor& offsets, int64_t i) {
  const int64_t begin = offsets[i].item<int64_t>(), end = offsets[i + 1].item<int64_t>();
  const torch::Tensor slice = flat.slice(0, begin, end).contiguous();
  return std::vector<int64_t>(slice.data_ptr<int64_t>(), slice.data_ptr<int64_t>() + slice.numel());
}

std::string ids_text(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out + "]";
}

std::string decode(const std::shared_ptr<Tokenizer>& tokenizer, const std::vector<int64_t>& ids) {
  return tokenizer ? tokenizer->decode(ids) : ids_text(ids);
}

// Entropy above which a token counts as high-entropy: the stored threshold, else the given quantile
// of this step's entropies on completion tokens.
double marking_threshold(const Loaded& l, double quantile) {
  if (!std::isnan(l.attrs.entropy_threshold)) return l.attrs.entropy_threshold;
  const Rollouts& r = l.rollouts;
  if (!r.entropies.defined() || r.entropies.numel() == 0) return std::nan("");
  const torch::Tensor e = r.entropies.to(torch::kFloat64).masked_select(r.completion_mask);
  return e.numel() ? torch::quantile(e, quantile).item<double>() : std::nan("");
}

// A tool-calling completion turn by turn: who wrote each span (the model, or a tool / the environment,
// whose tokens the loss leaves out), the calls and their results.
void show_conversation(const Rollouts& r, int64_t i, const std::vector<int64_t>& ids,
                       const std::shared_ptr<Tokenizer>& tokenizer) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(r.conversations[static_cast<size_t>(i)]);
  } catch (const nlohmann::json::exception&) {
    std::cout << "  (conversation record unreadable)\n";
    return;
  }
  std::cout << "  conversation: " << record.value("tool_calls", 0) << " tool call(s), " << record.value("tool_failures", 0)
            << " failed\n";
  const int64_t begin = r.completion_offsets[i].item<int64_t>();
  int turn = 0;
  for (const auto& span : record.value("turns", nlohmann::json::array())) {
    const size_t start = span.value("start", size_t(0)), end = std::min(span.value("end", size_t(0)), ids.size());
    if (start >= end) continue;
    const bool by_model = span.value("by", "") == "model";
    int64_t masked = 0;
    if (r.tool_mask.defined())
      for (size_t t = start; t < end; ++t) masked += !r.tool_mask[begin + static_cast<int64_t>(t)].item<bool>();
    std::cout << "  turn " << turn++ << (by_model ? " [model]" : " [tool, out of the loss]") << " tokens " << start << ".."
              << end << (masked > 0 && by_model ? str(" (", masked, " masked!)") : "") << ":\n    "
              << decode(tokenizer, std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                                        ids.begin() + static_cast<std::ptrdiff_t>(end)))
              << "\n";
  }
  for (const auto& message : record.value("messages", nlohmann::json::array())) {
    if (message.contains("tool_calls"))
      for (const auto& call : message["tool_calls"])
        std::cout << "  call:   " << call["function"].value("name", "?") << "("
                  << call["function"].value("arguments", nlohmann::json::object()).dump() << ")\n";
    if (message.value("role", "") == "tool")
      std::cout << "  result: " << message.value("name", "?") << " -> "
                << (message["content"].is_string() ? message["content"].get<std::string>() : message["content"].dump())
                << (message.value("failed", false) ? "  (failed)" : "") << "\n";
  }
}

void show(const Loaded& l, int64_t count, const std::shared_ptr<Tokenizer>& tokenizer, double quantile) {
  const Rollouts& r = l.rollouts;
  const double threshold = marking_threshold(l, quantile);
  std::cout << "step " << r.step << " rank " << l.entry.rank << ": " << r.size() << " completions; high-entropy tokens "
            << (std::isnan(l.attrs.entropy_threshold) ? str("(entropy >= ", fixed(threshold, 3), ", the ", quantile,
                                                             " quantile of this step: no threshold stored)")
                                                      : str("(entropy >= stored threshold ", fixed(threshold, 3), ")"))
            << " are marked [[like this]]\n";
  for (int64_t i = 0; i < std::min(count, r.size()); ++i) {
    std::cout << "\n#" << i << "  group " << r.group_index[i].item<int64_t>() << "  reward "
              << fixed(r.rewards[i].item<double>()) << "  advantage " << fixed(r.advantages[i].item<double>());
    for (size_t k = 0; k < l.attrs.reward_names.size(); ++k)
      std::cout << "  " << l.attrs.reward_names[k] << "=" << fixed(r.rewards_per_func[i][k].item<double>());
    if (r.truncated[i].item<bool>()) std::cout << "  (truncated)";
    std::cout << "\n  prompt:     " << decode(tokenizer, ids_of(r.prompt_ids, r.prompt_offsets, i)) << "\n";
    const std::vector<int64_t> ids = ids_of(r.completion_ids, r.completion_offsets, i);
    std::cout << "  completion: " << decode(tokenizer, ids) << "\n";
    if (!r.conversations.empty()) show_conversation(r, i, ids, tokenizer);
    if (!r.entropies.defined() || std::isnan(threshold)) continue;
    std::string marked;
    const int64_t begin = r.completion_offsets[i].item<int64_t>();
    for (size_t j = 0; j < ids.size(); ++j) {
      const std::string token = tokenizer ? tokenizer->decode({ids[j]}) : std::to_string(ids[j]) + " ";
      const bool by_model = !r.tool_mask.defined() || r.tool_mask[begin + j].item<bool>();  // tools' tokens: never marked
      const bool high = r.completion_mask[begin + j].item<bool>() && by_model &&
                        r.entropies[begin + j].item<double>() >= threshold;
      marked += high ? "[[" + token + "]]" : token;
    }
    std::cout << "  marked:     " << marked << "\n";
  }
}

std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void export_rows(const std::vector<Loaded>& loaded, const std::string& format, const std::shared_ptr<Tokenizer>& tokenizer,
                 std::ostream& out) {
  std::vector<std::string> reward_names;
  if (!loaded.empty()) reward_names = loaded.front().attrs.reward_names;
  if (format == "csv") {
    out << "step,rank,index,group,reward,advantage";
    for (const std::string& n : reward_names) out << ",reward_" << n;
    out << ",completion_tokens,truncated,mean_entropy,prompt,completion\n";
  }
  for (const Loaded& l : loaded) {
    const Rollouts& r = l.rollouts;
    const torch::Tensor lengths = lengths_of(r);
    for (int64_t i = 0; i < r.size(); ++i) {
      const int64_t begin = r.completion_offsets[i].item<int64_t>(), end = r.completion_offsets[i + 1].item<int64_t>();
      double mean_entropy = std::nan("");
      if (r.entropies.defined() && end > begin) mean_entropy = r.entropies.slice(0, begin, end).to(torch::kFloat64).mean().item<double>();
      const std::string prompt = decode(tokenizer, ids_of(r.prompt_ids, r.prompt_offsets, i));
      const std::string completion = decode(tokenizer, ids_of(r.completion_ids, r.completion_offsets, i));
      const auto number = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
      if (format == "jsonl") {
        nlohmann::json row = {{"step", r.step},
                              {"rank", l.entry.rank},
                              {"index", i},
                              {"group", r.group_index[i].item<int64_t>()},
                              {"reward", number(r.rewards[i].item<double>())},
                              {"advantage", number(r.advantages[i].item<double>())},
                              {"completion_tokens", lengths[i].item<int64_t>()},
                              {"truncated", r.truncated[i].item<bool>()},
                              {"mean_entropy", number(mean_entropy)},
                              {"prompt", prompt},
                              {"completion", completion}};
        nlohmann::json per_func = nlohmann::json::object();
        for (size_t k = 0; k < l.attrs.reward_names.size(); ++k)
          per_func[l.attrs.reward_names[k]] = number(r.rewards_per_func[i][k].item<double>());
        row["rewards_per_func"] = per_func;
        if (r.tool_mask.defined())
          row["model_tokens"] = r.tool_mask.slice(0, begin, end).sum().item<int64_t>();
        if (!r.conversations.empty()) {
          try {
            row["conversation"] = nlohmann::json::parse(r.conversations[static_cast<size_t>(i)]);
          } catch (const nlohmann::json::exception&) {
            row["conversation"] = r.conversations[static_cast<size_t>(i)];
          }
        }
        out << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } else {
        out << r.step << "," << l.entry.rank << "," << i << "," << r.group_index[i].item<int64_t>() << ","
            << std::setprecision(17) << r.rewards[i].item<double>() << "," << r.advantages[i].item<double>();
        for (size_t k = 0; k < l.attrs.reward_names.size(); ++k) out << "," << r.rewards_per_func[i][k].item<double>();
        out << "," << lengths[i].item<int64_t>() << "," << (r.truncated[i].item<bool>() ? 1 : 0) << "," << mean_entropy
            << "," << csv_quote(prompt) << "," << csv_quote(completion) << "\n";
      }
    }
  }
}

void histogram(const std::vector<Loaded>& loaded, int64_t bins) {
  std::vector<torch::Tensor> parts;
  for (const Loaded& l : loaded)
    if (l.rollouts.entropies.defined())
      parts.push_back(l.rollouts.entropies.to(torch::kFloat64).masked_select(l.rollouts.completion_mask));
  inputCheck(!parts.empty(), "inspect --histogram entropies: the selected rollouts store no entropies");
  const torch::Tensor e = torch::cat(parts);
  inputCheck(e.numel() > 0, "inspect --histogram entropies: no completion tokens in the selection");
  const double lo = e.min().item<double>(), hi = std::max(e.max().item<double>(), lo + 1e-9);
  const torch::Tensor counts = torch::histc(e, bins, lo, hi);
  const double most = counts.max().item<double>();
  std::cout << "entropy of " << e.numel() << " completion tokens (nats): mean " << fixed(e.mean().item<double>())
            << ", median " << fixed(e.median().item<double>()) << "\n";
  for (int64_t b = 0; b < bins; ++b) {
    const double from = lo + (hi - lo) * b / bins, to = lo + (hi - lo) * (b + 1) / bins;
    const int64_t count = static_cast<int64_t>(counts[b].item<double>());
    std::cout << std::setw(8) << fixed(from, 3) << " - " << std::setw(8) << fixed(to, 3) << " " << std::setw(8) << count
              << " " << std::string(static_cast<size_t>(most > 0 ? std::lround(50.0 * count / most) : 0), '#') << "\n";
  }
  std::set<double> thresholds;
  for (const Loaded& l : loaded)
    if (!std::isnan(l.attrs.entropy_threshold)) thresholds.insert(l.attrs.entropy_threshold);
  if (!thresholds.empty())
    std::cout << "stored entropy thresholds: " << fixed(*thresholds.begin(), 4) << " .. " << fixed(*thresholds.rbegin(), 4)
              << "\n";
}

void summarise(const std::vector<Loaded>& loaded) {
  std::map<int64_t, std::vector<const Loaded*>> by_step;
  for (const Loaded& l : loaded) by_step[l.rollouts.step].push_back(&l);
  for (const auto& [step, parts] : by_step) {
    std::vector<torch::Tensor> rewards, per_func, advantages, lengths, truncated;
    std::vector<double> thresholds;
    int64_t tool_tokens = 0, all_tokens = 0, tool_calls = 0;
    for (const Loaded* l : parts) {
      rewards.push_back(l->rollouts.rewards.to(torch::kFloat64));
      per_func.push_back(l->rollouts.rewards_per_func);
      advantages.push_back(l->rollouts.advantages.to(torch::kFloat64));
      lengths.push_back(lengths_of(l->rollouts).to(torch::kFloat64));
      truncated.push_back(l->rollouts.truncated.to(torch::kFloat64));
      if (!std::isnan(l->attrs.entropy_threshold)) thresholds.push_back(l->attrs.entropy_threshold);
      if (l->rollouts.tool_mask.defined()) {
        tool_tokens += static_cast<int64_t>((~l->rollouts.tool_mask).sum().item<int64_t>());
        all_tokens += l->rollouts.tool_mask.numel();
      }
      for (const std::string& text : l->rollouts.conversations) {
        try {
          tool_calls += nlohmann::json::parse(text).value("tool_calls", 0);
        } catch (const nlohmann::json::exception&) {
        }
      }
    }
    const torch::Tensor r = torch::cat(rewards), a = torch::cat(advantages), len = torch::cat(lengths);
    const int64_t n = r.numel();
    std::cout << "step " << step << ": " << n << " rollouts from " << parts.size() << " rank(s)"
              << " | reward " << fixed(nan_mean(r)) << " +- " << fixed(nan_std(r));
    const std::vector<std::string>& names = parts.front()->attrs.reward_names;
    const torch::Tensor pf = torch::cat(per_func);
    for (size_t k = 0; k < names.size() && static_cast<int64_t>(k) < pf.size(1); ++k)
      std::cout << " | reward " << names[k] << " " << fixed(nan_mean(pf.select(1, k))) << " +- " << fixed(nan_std(pf.select(1, k)));
    std::cout << " | advantage mean " << fixed(n ? a.mean().item<double>() : NAN) << " std " << fixed(nan_std(a))
              << " min " << fixed(n ? a.min().item<double>() : NAN) << " max " << fixed(n ? a.max().item<double>() : NAN)
              << " | completion tokens mean " << fixed(n ? len.mean().item<double>() : NAN, 1) << " min "
              << (n ? len.min().item<int64_t>() : 0) << " max " << (n ? len.max().item<int64_t>() : 0) << " truncated "
              << fixed(n ? torch::cat(truncated).mean().item<double>() : NAN, 3) << " | zero-std groups "
              << fixed(zero_std_group_fraction(parts), 3) << " | entropy threshold "
              << (thresholds.empty() ? std::string("-") : fixed(thresholds.front()));
    if (all_tokens > 0)
      std::cout << " | tool calls " << tool_calls << ", tool tokens " << tool_tokens << " of " << all_tokens
                << " (out of the loss)";
    std::cout << "\n";
  }
}

}  // namespace

int inspect(const Args& args) {
  po::options_description options(
      "rayless inspect PATH [--step N] [--rank R] [--show K] [--export jsonl|csv] [--histogram entropies]");
  std::string path, export_format, histogram_of, output, tokenizer_path;
  int64_t step = -1, rank = -1, show_count = 0, bins = 20;
  double quantile = 0.8;
  options.add_options()("path", po::value(&path), "index.h5, rank-RRRRR.h5, a rollouts/ or run directory")(
      "step", po::value(&step), "only this step (--show: default the last)")(
      "rank", po::value(&rank), "only this rank (--show: default 0)")(
      "show", po::value(&show_count), "print K decoded prompts and completions with rewards and advantages")(
      "export", po::value(&export_format), "write one row per completion: jsonl | csv")(
      "output,o", po::value(&output), "file for --export (default: stdout)")(
      "histogram", po::value(&histogram_of), "draw a histogram: entropies")(
      "bins", po::value(&bins), "histogram bins (default 20)")(
      "tokenizer", po::value(&tokenizer_path), "tokenizer.json or \"byte\" (default: the one stored with the rollouts)")(
      "mark-quantile", po::value(&quantile),
      "--show without a stored entropy threshold marks tokens above this quantile (default 0.8)");
  po::positional_options_description positional;
  positional.add("path", 1);
  po::variables_map vm;
  if (!parse_options(args, "rayless inspect PATH [options]", options, vm, &positional)) return 0;
  inputCheck(!path.empty(), "inspect: missing PATH (index.h5, a rank file, a rollouts/ or run directory)");
  inputCheck(export_format.empty() || export_format == "jsonl" || export_format == "csv",
             "inspect: --export must be jsonl or csv, not \"", export_format, "\"");
  inputCheck(histogram_of.empty() || histogram_of == "entropies", "inspect: --histogram knows only \"entropies\"");
  inputCheck(bins >= 1 && bins <= 1000, "inspect: --bins must be in [1, 1000]");
  inputCheck(quantile >= 0 && quantile <= 1, "inspect: --mark-quantile must be in [0, 1]");
  inputCheck(!vm.count("step") || step >= 0, "inspect: --step ", step, " is not allowed: steps count from 0");
  inputCheck(!vm.count("rank") || rank >= 0, "inspect: --rank ", rank, " is not allowed: ranks count from 0");
  inputCheck(!vm.count("show") || show_count >= 1, "inspect: --show ", show_count,
             " is not allowed: the number of completions to print, at least 1");
  // one output per call: the flags of two are a contradiction, and an option of one without it a slip
  const int outputs = (vm.count("show") ? 1 : 0) + (export_format.empty() ? 0 : 1) + (histogram_of.empty() ? 0 : 1);
  inputCheck(outputs <= 1, "inspect: --show, --export and --histogram each print something else: pass one of them");
  inputCheck(!vm.count("output") || !export_format.empty(), "inspect: --output is the file of --export: add --export jsonl|csv");
  inputCheck(!vm.count("bins") || !histogram_of.empty(), "inspect: --bins is for --histogram entropies");
  inputCheck(!vm.count("mark-quantile") || vm.count("show"), "inspect: --mark-quantile is for --show");

  std::vector<RolloutEntry> entries = list_rollouts(path);
  inputCheck(!entries.empty(), path, ": the store holds no steps yet");
  if (show_count > 0) {  // one step of one rank
    if (step < 0) step = entries.back().step;
    if (rank < 0) rank = 0;
  }
  std::vector<Loaded> loaded;
  for (const RolloutEntry& e : entries) {
    if ((step >= 0 && e.step != step) || (rank >= 0 && e.rank != rank)) continue;
    Loaded l{e, {}, {}};
    l.rollouts = read_rollout_entry(e, &l.attrs);
    loaded.push_back(std::move(l));
  }
  inputCheck(!loaded.empty(), path, ": no rollouts for", step >= 0 ? str(" step ", step) : "",
             rank >= 0 ? str(" rank ", rank) : "", " (", entries.size(), " stored: steps ", entries.front().step, " .. ",
             entries.back().step, ")");

  std::shared_ptr<Tokenizer> tokenizer;
  if (show_count > 0 || !export_format.empty()) tokenizer = try_tokenizer(tokenizer_path, loaded.front().attrs, path);
  if (!export_format.empty()) {
    if (output.empty()) {
      export_rows(loaded, export_format, tokenizer, std::cout);
    } else {
      std::ostringstream text;
      export_rows(loaded, export_format, tokenizer, text);
      write_text_atomically(output, text.str());
      std::cout << "wrote " << output << "\n";
    }
    return 0;
  }
  if (!histogram_of.empty()) {
    histogram(loaded, bins);
    return 0;
  }
  if (show_count > 0) {
    show(loaded.front(), show_count, tokenizer, quantile);
    return 0;
  }
  summarise(loaded);
  return 0;
}

}  // namespace rayless::cli
