#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include "rayless/runtime/watchdog.h"

using namespace rayless;

namespace {
struct Captured {
  std::mutex mutex;
  std::string message;
  std::atomic<int> calls{0};
};

// Replaces the stall handler: what it reports lands in the returned object instead of ending the test.
std::shared_ptr<Captured> capture_stalls(Watchdog& watchdog) {
  auto captured = std::make_shared<Captured>();
  watchdog.set_stall_handler([captured](const std::string& message) {
    std::lock_guard<std::mutex> lock(captured->mutex);
    captured->message = message;
    ++captured->calls;
  });
  return captured;
}

// Holds a collective open until the watchdog reports it: the tests check what, not how fast.
void stall_in(const char* collective, const Captured& captured) {
  CollectiveGuard guard(collective);
  for (int i = 0; i < 2000 && captured.calls == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}
}  // namespace

TEST_CASE("a collective past its deadline reports name, step and rank") {
  Watchdog& watchdog = Watchdog::instance();
  auto captured = capture_stalls(watchdog);
  watchdog.start(0.05, 3);
  set_watchdog_step(17);
  stall_in("allreduce", *captured);
  watchdog.stop();
  watchdog.reset_stall_handler();
  REQUIRE(captured->calls == 1);  // reported once, not once per poll
  CHECK_THAT(captured->message, Catch::Contains("collective allreduce stalled on rank 3 at step 17"));
  CHECK_THAT(captured->message, Catch::Contains("collective_timeout_s"));
}

TEST_CASE("collectives that finish in time are not reported") {
  std::atomic<int> calls{0};
  Watchdog& watchdog = Watchdog::instance();
  watchdog.set_stall_handler([&calls](const std::string&) { ++calls; });
  watchdog.start(30, 0);
  for (int i = 0; i < 100; ++i) CollectiveGuard guard("barrier");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  watchdog.stop();
  watchdog.reset_stall_handler();
  CHECK(calls == 0);
}

TEST_CASE("a stall names the ranks that never wrote a heartbeat, not those that are on time") {
  // world of 3 seen from rank 0: rank 2's heartbeat is recent and ahead, rank 1 has none (stopped
  // before its first one); a stale file of rank 0 from an earlier attempt must not matter
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "rayless-test-heartbeat";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "rank-00000") << "999999 99 0 old-attempt\n"; }
  { std::ofstream(dir / "rank-00002") << "1000000 5 " << std::time(nullptr) << " node2\n"; }
  Watchdog& watchdog = Watchdog::instance();
  auto captured = capture_stalls(watchdog);
  watchdog.start(0.05, 0);
  watchdog.set_heartbeat_dir(dir.string(), 3);
  CHECK((!std::filesystem::exists(dir / "rank-00000") || std::ifstream(dir / "rank-00000").peek() != '9'));
  stall_in("allreduce", *captured);
  watchdog.stop();
  watchdog.set_heartbeat_dir("", 0);
  watchdog.reset_stall_handler();
  REQUIRE(captured->calls == 1);
  CHECK_THAT(captured->message, Catch::Contains("not arrived: rank 1 (no heartbeat yet)"));
  CHECK_THAT(captured->message, !Catch::Contains("rank 2"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("rank groups: call counts compare within a group, another group's rank is named only when silent") {
  // world of 4 seen from rank 0 (group 0 with rank 1; ranks 2, 3 group 1, as asynchronous GRPO's
  // training and generation ranks): every other rank is behind in calls, ranks 1 and 2 write recent
  // heartbeats, rank 3 went quiet
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "rayless-test-heartbeat-groups";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const long long now = std::time(nullptr);
  { std::ofstream(dir / "rank-00001") << "0 5 " << now << " node1\n"; }
  { std::ofstream(dir / "rank-00002") << "0 5 " << now << " node2\n"; }
  { std::ofstream(dir / "rank-00003") << "0 5 " << now - 600 << " node2\n"; }
  Watchdog& watchdog = Watchdog::instance();
  auto captured = capture_stalls(watchdog);
  watchdog.start(0.05, 0);
  watchdog.set_heartbeat_dir(dir.string(), 4);
  watchdog.set_rank_groups({0, 0, 1, 1});
  for (int i = 0; i < 3; ++i) CollectiveGuard counted("barrier");
  stall_in("allgather", *captured);
  watchdog.stop();
  watchdog.set_rank_groups({});
  watchdog.set_heartbeat_dir("", 0);
  watchdog.reset_stall_handler();
  REQUIRE(captured->calls == 1);
  CHECK_THAT(captured->message, Catch::Contains("rank 1 (node1"));  // its own group, behind in calls
  CHECK_THAT(captured->message, !Catch::Contains("rank 2"));        // the other group, heartbeat recent
  CHECK_THAT(captured->message, Catch::Contains("rank 3 (node2: silent for"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("collectives in an UncountedCollectives scope are timed but not counted") {
  Watchdog& watchdog = Watchdog::instance();
  auto call_number = [](const std::string& message) {
    const size_t at = message.find("collective call #");
    REQUIRE(at != std::string::npos);
    return std::stoll(message.substr(at + 17));
  };
  auto first = capture_stalls(watchdog);
  watchdog.start(0.05, 0);
  stall_in("allreduce", *first);  // counted: its number is the count so far
  watchdog.stop();
  auto second = capture_stalls(watchdog);
  watchdog.start(0.05, 0);
  {
    UncountedCollectives only_some_ranks;
    for (int i = 0; i < 5; ++i) CollectiveGuard pushed("broadcast");
    stall_in("broadcast", *second);  // still timed and reported
  }
  watchdog.stop();
  watchdog.reset_stall_handler();
  REQUIRE(first->calls == 1);
  REQUIRE(second->calls == 1);
  CHECK_THAT(second->message, Catch::Contains("collective broadcast stalled"));
  CHECK(call_number(second->message) == call_number(first->message));  // six broadcasts, none counted
}
