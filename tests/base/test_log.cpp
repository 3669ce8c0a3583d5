#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "rayless/base/error.h"
#include "rayless/base/log.h"

using namespace rayless;

namespace {

// The messages `print` sends to file descriptor `fd`, one per write(): the descriptor is pointed at a
// SOCK_SEQPACKET socket for the call, and such a socket keeps the boundary of every write.
std::vector<std::string> writes_to(int fd, const std::function<void()>& print) {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0);
  std::cout.flush();  // what Catch2 holds goes to the console, not into the socket
  std::cerr.flush();
  const int saved = ::dup(fd);
  REQUIRE(saved >= 0);
  REQUIRE(::dup2(pair[0], fd) == fd);
  print();
  ::dup2(saved, fd);
  ::close(saved);
  ::close(pair[0]);
  std::vector<std::string> messages;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(pair[1], buffer, sizeof(buffer), 0)) > 0;) messages.emplace_back(buffer, n);
  ::close(pair[1]);
  return messages;
}

}  // namespace

// mpirun forwards stdout and stderr on two pipes into one file: a warning written as "rayless: warning: "
// and then its text had another stream's lines land in between (faults-corrupt-files in CI, 2026-12-06)
TEST_CASE("log: each console line leaves in one write, whole") {
  set_log_rank(0);
  CHECK(writes_to(STDERR_FILENO, [] { log_warn("latest names step-8, which is damaged"); }) ==
        std::vector<std::string>{"rayless: warning: latest names step-8, which is damaged\n"});
  CHECK(writes_to(STDOUT_FILENO, [] { log_info("step 8/8 | entropy 5.482"); }) ==
        std::vector<std::string>{"step 8/8 | entropy 5.482\n"});
  CHECK(writes_to(STDERR_FILENO, [] { log_all("stalled in all-reduce"); }) ==
        std::vector<std::string>{"[rank 0] stalled in all-reduce\n"});
  CHECK(writes_to(STDERR_FILENO, [] { print_error("data.jsonl:3: bad\nline"); }) ==
        std::vector<std::string>{"rayless: error: data.jsonl:3: bad line\n"});
}

TEST_CASE("log: ranks other than 0 print nothing on the console but log_all") {
  set_log_rank(1);
  CHECK(writes_to(STDERR_FILENO, [] { log_warn("quiet"); }).empty());
  CHECK(writes_to(STDOUT_FILENO, [] { log_info("quiet"); }).empty());
  CHECK(writes_to(STDERR_FILENO, [] { log_all("loud"); }) == std::vector<std::string>{"[rank 1] loud\n"});
  set_log_rank(0);
}
