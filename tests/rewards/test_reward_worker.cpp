#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <cmath>

#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/rewards/rewards.h"
#include "rollout/rollout_test_util.h"

using namespace rayless;
using nlohmann::json;

namespace {

std::string python_worker(const std::string& script) { return "/usr/bin/python3 " + worker_script(script); }

struct Batch {
  std::vector<std::string> prompts, completions;
  std::vector<int64_t> counts;
  std::vector<json> rows;
};

Batch make_batch(const std::vector<std::string>& completions) {
  Batch b;
  for (size_t i = 0; i < completions.size(); ++i) {
    b.prompts.push_back("prompt " + std::to_string(i));
    b.completions.push_back(completions[i]);
    b.counts.push_back(static_cast<int64_t>(completions[i].size()));
    b.rows.push_back(json{{"prompt", "original"}, {"bonus", static_cast<int>(i) * 10}});
  }
  return b;
}

std::vector<double> run(RewardWorker& worker, const Batch& b) {
  return worker.score(b.prompts, b.completions, b.counts, b.rows);
}

// No live (non-zombie) process left in the worker's process group; waits up to 10 s for SIGKILL to land.
bool process_gone(int group) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool alive = false;
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      std::ifstream in(entry.path() / "stat");
      std::string stat;
      if (!entry.is_directory() || !std::getline(in, stat)) continue;
      // pid (comm) state ppid pgrp ...: comm may hold spaces, so parse after the last ')'
      std::istringstream fields(stat.substr(stat.rfind(')') + 2));
      char state = 0;
      int ppid = 0, pgrp = 0;
      fields >> state >> ppid >> pgrp;
      if (pgrp == group && state != 'Z') alive = true;
    }
    if (!alive) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

TEST_CASE("worker: one line per completion, fields passed, null and NaN become NaN") {
  RewardWorker worker(python_worker("length_worker.py"), 20.0, 0, 2);
  const Batch b = make_batch({"abc", "skip", "hello", "nan"});
  const std::vector<double> r = run(worker, b);
  REQUIRE(r.size() == 4);
  CHECK(r[0] == 3 + 0 + 2000);  // len + bonus + 1000 * RAYLESS_RANK
  CHECK(std::isnan(r[1]));
  CHECK(r[2] == 5 + 20 + 2000);
  CHECK(std::isnan(r[3]));
  // the process stays up between calls
  const std::vector<double> again = run(worker, make_batch({"xy"}));
  CHECK(again[0] == 2002);
}

TEST_CASE("worker: batched requests") {
  std::vector<std::string> completions;
  for (int i = 0; i < 7; ++i) completions.push_back(std::string(i + 1, 'z'));
  completions[3] = "skip";
  RewardWorker worker(python_worker("length_worker.py"), 20.0, 3, 0);  // batches of 3, 3, 1
  const std::vector<double> r = run(worker, make_batch(completions));
  REQUIRE(r.size() == 7);
  for (int i = 0; i < 7; ++i) {
    if (i == 3) CHECK(std::isnan(r[i]));
    else CHECK(r[i] == (i + 1) + 10 * i);
  }
}

TEST_CASE("worker: many requests do not deadlock the pipes") {
  // ~4 MB of requests: more than any pipe buffer, so writing and reading must interleave
  std::vector<std::string> completions(2000, std::string(2000, 'q'));
  RewardWorker worker(python_worker("length_worker.py"), 60.0, 0, 0);
  const std::vector<double> r = run(worker, make_batch(completions));
  REQUIRE(r.size() == 2000);
  CHECK(r[1999] == 2000 + 19990);
}

TEST_CASE("worker: a worker that exits is a runtime error naming the command") {
  const std::string command = "sh " + worker_script("exit_after_one.sh");
  RewardWorker worker(command, 20.0, 0, 0);
  try {
    run(worker, make_batch({"a", "b", "c"}));
    FAIL("no error");
  } catch (const RuntimeError& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains(command));
    CHECK_THAT(message, Catch::Contains("exited with status 3"));
  }
}

TEST_CASE("worker: a named worker ([reward.workers.NAME]) is named in its errors") {
  const std::string command = "sh " + worker_script("exit_after_one.sh");
  RewardWorker worker(command, 20.0, 0, 0, "judge");
  CHECK(worker.name() == "judge");
  CHECK_THROWS_WITH(run(worker, make_batch({"a", "b"})),
                    Catch::Contains("reward worker \"judge\" (" + command + ")") && Catch::Contains("exited with status 3"));
}

TEST_CASE("worker: a command that does not exist is a runtime error") {
  RewardWorker worker("/nonexistent/reward-worker --flag", 20.0, 0, 0);
  CHECK_THROWS_WITH(run(worker, make_batch({"a"})), Catch::Contains("/nonexistent/reward-worker") &&
                                                        Catch::Contains("exited with status 127"));
}

TEST_CASE("worker: a hung worker times out and is stopped") {
  const std::string command = "sh " + worker_script("hang.sh");
  RewardWorker worker(command, 0.5, 0, 0);
  const int pid = worker.pid();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(run(worker, make_batch({"a"})), Catch::Contains(command) && Catch::Contains("no answer within"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));  // bounded, not a timing test
  CHECK(process_gone(pid));
}

TEST_CASE("worker: garbage answers are input errors naming the command") {
  const std::string garbage = "sh " + worker_script("garbage.sh");
  {
    RewardWorker worker(garbage, 20.0, 0, 0);
    CHECK_THROWS_AS(run(worker, make_batch({"a"})), InputError);
  }
  {
    RewardWorker worker(garbage, 20.0, 0, 0);
    CHECK_THROWS_WITH(run(worker, make_batch({"a"})), Catch::Contains(garbage) && Catch::Contains("hello there"));
  }
  const std::string wrong = "sh " + worker_script("wrong_shape.sh");
  {
    RewardWorker worker(wrong, 20.0, 0, 0);
    CHECK_THROWS_AS(run(worker, make_batch({"a"})), InputError);  // {"reward": "high"}
  }
  {
    RewardWorker worker(wrong, 20.0, 2, 0);
    CHECK_THROWS_WITH(run(worker, make_batch({"a", "b"})), Catch::Contains("2 numbers|null"));  // one reward for two
  }
}

TEST_CASE("worker: RewardSet runs the worker next to built-ins") {
  Config config;
  config.reward.functions = {"length", "worker"};
  config.reward.length_target = 0;
  config.reward.worker_command = python_worker("length_worker.py");
  RewardSet rewards(config, 1);
  CHECK(rewards.names() == std::vector<std::string>{"length", "worker"});
  const Batch b = make_batch({"abcd", "skip"});
  torch::Tensor scores = rewards.score(b.prompts, b.completions, b.counts, b.rows);
  CHECK(scores[0][0].item<double>() == -4.0);
  CHECK(scores[0][1].item<double>() == 4 + 1000);
  CHECK(std::isnan(scores[1][1].item<double>()));
}

TEST_CASE("worker: the math_answer example worker") {
  const std::string command = "/usr/bin/python3 " + std::string(RAYLESS_SOURCE_DIR) + "/tools/reward_workers/math_answer.py";
  for (int64_t batch : {0, 2}) {
    RewardWorker worker(command, 20.0, batch, 0);
    const std::vector<std::string> completions = {"6 * 7 = 42, so the answer is \\boxed{42}", "The answer is 41.",
                                                  "#### 1,000", "no idea", "x = 0.5"};
    const std::vector<json> rows = {json{{"answer", "42"}}, json{{"answer", 42}}, json{{"answer", "1000"}},
                                    json{{"answer", "3"}}, json{{"answer", "1/2"}}};
    const std::vector<double> r = worker.score(std::vector<std::string>(5, "q"), completions, {1, 1, 1, 1, 1}, rows);
    CHECK(r == std::vector<double>{1.0, 0.0, 1.0, 0.0, 1.0});
    // a row without an answer gets no score
    const std::vector<double> none = worker.score({"q"}, {"42"}, {1}, {json{{"id", 1}}});
    CHECK(std::isnan(none[0]));
  }
}
