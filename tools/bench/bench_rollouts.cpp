// rayless bench rollouts: write and read time of the rollout store for one realistic step
// (default 64 completions x 256 tokens, prompts of 128 tokens), repeated; prints a table.
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "bench/benches.h"
#include "cli/options.h"
#include "rayless/rollout/rollout_store.h"

namespace fs = std::filesystem;

namespace rayless::cli {
namespace {

Rollouts synthetic_step(int64_t step, int64_t completions, int64_t completion_tokens, int64_t prompt_tokens,
                        int64_t generations, int64_t reward_functions, bool with_ref) {
  torch::manual_seed(step);
  Rollouts r;
  r.step = step;
  r.rank = 0;
  const int64_t t = completions * completion_tokens;
  r.prompt_ids = torch::randint(0, 151000, {completions * prompt_tokens}, torch::kInt64);
  r.prompt_offsets = torch::arange(0, completions + 1, torch::kInt64) * prompt_tokens;
  r.completion_ids = torch::randint(0, 151000, {t}, torch::kInt64);
  r.completion_offsets = torch::arange(0, completions + 1, torch::kInt64) * completion_tokens;
  r.group_index = torch::arange(completions, torch::kInt64).div(generations, "floor");
  r.rewards_per_func = torch::randn({completions, reward_functions}, torch::kFloat64);
  r.rewards = r.rewards_per_func.sum(1);
  r.advantages = torch::randn({completions}, torch::kFloat32);
  r.old_logps = -torch::rand({t}) * 8;
  r.entropies = torch::rand({t}) * 4;
  r.completion_mask = torch::ones({t}, torch::kBool);
  if (with_ref) r.ref_logps = -torch::rand({t}) * 8;
  r.truncated = torch::zeros({completions}, torch::kBool);
  return r;
}

}  // namespace

int bench_rollouts(const Args& args) {
  po::options_description options("rayless-bench rollouts [options]");
  int64_t completions = 64, completion_tokens = 256, prompt_tokens = 128, steps = 20, generations = 8;
  std::string dir = "bench-rollouts.tmp";
  bool with_ref = false, keep = false;
  options.add_options()("completions", po::value(&completions), "completions per step and rank (default 64)")(
      "tokens", po::value(&completion_tokens), "tokens per completion (default 256)")(
      "prompt-tokens", po::value(&prompt_tokens), "tokens per prompt (default 128)")(
      "steps", po::value(&steps), "steps written and read (default 20)")(
      "ref", po::bool_switch(&with_ref), "also store ref_logps (beta > 0)")(
      "dir", po::value(&dir), "scratch directory (default bench-rollouts.tmp, removed afterwards)")(
      "keep", po::bool_switch(&keep), "keep the scratch directory");
  po::variables_map vm;
  if (!parse_options(args, "rayless-bench rollouts [options]", options, vm)) return 0;
  inputCheck(completions >= 1 && completion_tokens >= 1 && prompt_tokens >= 1 && steps >= 1,
             "bench rollouts: sizes and --steps must be >= 1");
  generations = std::min(generations, completions);
  fs::remove_all(dir);
  RolloutAttrs attrs;
  attrs.num_generations = generations;
  attrs.reward_names = {"length", "format"};
  attrs.config_hash = "bench";
  attrs.tokenizer_hash = "bench";
  using Clock = BenchClock;
  double write_s = 0, read_s = 0, first_write_s = 0, last_write_s = 0;
  std::vector<Rollouts> data;
  for (int64_t s = 1; s <= steps; ++s) data.push_back(synthetic_step(s, completions, completion_tokens, prompt_tokens, generations, 2, with_ref));
  for (int64_t s = 1; s <= steps; ++s) {
    const auto start = Clock::now();
    write_rollouts(dir, data[s - 1], attrs);
    const double took = seconds_since(start);
    write_s += took;
    if (s == 1) first_write_s = took;
    if (s == steps) last_write_s = took;
  }
  for (int64_t s = 1; s <= steps; ++s) {
    const auto start = Clock::now();
    const Rollouts r = read_rollouts(dir, s, 0, "bench", "bench");
    read_s += seconds_since(start);
    runtimeCheck(torch::equal(r.completion_ids, data[s - 1].completion_ids), "bench rollouts: read back differs");
  }
  uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) bytes += e.file_size();
  const double raw_mb = static_cast<double>(completions * (completion_tokens * (4 + 4 + 4 + 1 + (with_ref ? 4 : 0)) +
                                                          prompt_tokens * 4 + 64)) / 1e6;
  const double tokens = static_cast<double>(completions * completion_tokens);
  std::cout << std::fixed << std::setprecision(2) << "rollout store, " << completions << " completions x "
            << completion_tokens << " tokens (+ " << prompt_tokens << "-token prompts), " << steps << " steps"
            << (with_ref ? ", with ref_logps" : "") << "\n\n"
            << "| measure | value |\n| --- | --- |\n"
            << "| write per step (mean) | " << 1e3 * write_s / steps << " ms |\n"
            << "| write, first / last step | " << 1e3 * first_write_s << " / " << 1e3 * last_write_s << " ms |\n"
            << "| read per step (mean) | " << 1e3 * read_s / steps << " ms |\n"
            << "| write throughput | " << tokens * steps / write_s / 1e6 << " M completion tokens/s |\n"
            << "| on disk per step | " << static_cast<double>(bytes) / steps / 1e6 << " MB (" << raw_mb
            << " MB uncompressed) |\n";
  if (!keep) fs::remove_all(dir);
  return 0;
}

}  // namespace rayless::cli
