// The worker process: spawn, JSON-line exchange under a per-answer timeout, stop. Every wait is
// bounded by poll(), so a hung or dead process becomes an error that names it.
#include "rayless/base/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "rayless/base/error.h"

extern char** environ;

namespace rayless {
namespace {

using Clock = std::chrono::steady_clock;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return str("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str("was killed by signal ", WTERMSIG(status));
  return "stopped";
}

// Python's json module writes NaN/Infinity for non-finite floats; JSON has no such tokens, so they
// become null (no score) before parsing. Only bare tokens outside strings are touched.
std::string nan_tokens_to_null(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  size_t i = 0;
  while (i < line.size()) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) out += line[++i];
      else if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::strlen(token);
      if (line.compare(i, n, token) == 0) {
        out += "null";
        i += n;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += line[i++];
  }
  return out;
}

}  // namespace

std::optional<nlohmann::ordered_json> parse_answer_line(const std::string& line) {
  try {
    return nlohmann::ordered_json::parse(nan_tokens_to_null(line));
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::string one_line_excerpt(const std::string& text, size_t limit) {
  std::string out = text.size() > limit ? text.substr(0, limit) + "..." : text;
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

WorkerProcess::WorkerProcess(std::string command, double timeout_s, int rank, std::string who)
    : command_(std::move(command)), timeout_s_(timeout_s), who_(std::move(who)) {
  // A worker that dies while we write must give EPIPE (an error we report), not kill this process.
  ::signal(SIGPIPE, SIG_IGN);
  int in_pipe[2], out_pipe[2];
  runtimeCheck(::pipe2(in_pipe, O_CLOEXEC) == 0 && ::pipe2(out_pipe, O_CLOEXEC) == 0, who_, ": pipe: ",
               std::strerror(errno));
  // posix_spawn is fork + exec without copying this (large) process's page tables first.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "RAYLESS_RANK=", 13) != 0) env_strings.emplace_back(*e);
  env_strings.push_back(str("RAYLESS_RANK=", rank));
  std::vector<char*> env;
  for (std::string& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c";
  char* argv[] = {sh.data(), dash_c.data(), command_.data(), nullptr};
  // its own process group, so stopping it also stops what the shell started (sh -c "python3 ...")
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attributes, argv, env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    throw RuntimeError(str(who_, ": cannot start /bin/sh: ", std::strerror(rc)));
  }
  pid_ = pid;
  group_ = pid;
  to_worker_ = in_pipe[1];
  from_worker_ = out_pipe[0];
  ::fcntl(to_worker_, F_SETFL, ::fcntl(to_worker_, F_GETFL) | O_NONBLOCK);
  ::fcntl(from_worker_, F_SETFL, ::fcntl(from_worker_, F_GETFL) | O_NONBLOCK);
}

WorkerProcess::~WorkerProcess() { stop(); }

void WorkerProcess::stop() {
  if (to_worker_ >= 0) ::close(to_worker_), to_worker_ = -1;  // EOF on stdin: a polite worker exits
  if (from_worker_ >= 0) ::close(from_worker_), from_worker_ = -1;
  if (pid_ <= 0) {
    if (group_ > 0) ::kill(-group_, SIGKILL), group_ = -1;
    return;
  }
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 50 && !exited; ++i) {  // up to 0.5 s to exit by itself
    exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-group_, SIGKILL);  // the whole group: children of the shell must not outlive it
  if (!exited) ::waitpid(pid_, &status, 0);
  pid_ = -1;
  group_ = -1;
}

void WorkerProcess::fail_exited(const std::string& during) {
  int status = 0;
  std::string how = "closed its stdout";
  if (pid_ > 0) {
    // the pipe closed: give the process a moment to finish exiting so its status is known
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        how = describe_status(status);
        pid_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  stop();
  throw RuntimeError(str(who_, " ", how, " ", during));
}

std::vector<std::string> WorkerProcess::exchange(const std::vector<std::string>& lines,
                                                const std::function<std::string(size_t)>& request_context) {
  const auto context = [&](size_t request) { return request_context && request < lines.size() ? request_context(request) : std::string(); };
  if (pid_ <= 0 || to_worker_ < 0) throw RuntimeError(str(who_, " is not running"));
  std::string outgoing;
  for (const std::string& line : lines) outgoing += line;
  size_t written = 0;
  std::vector<std::string> answers;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  auto deadline = Clock::now() + timeout;  // reset whenever an answer arrives: the limit is per request
  const auto take_lines = [&] {
    size_t newline;
    while (answers.size() < lines.size() && (newline = pending_.find('\n')) != std::string::npos) {
      answers.push_back(pending_.substr(0, newline));
      pending_.erase(0, newline + 1);
      deadline = Clock::now() + timeout;
    }
  };
  take_lines();
  while (answers.size() < lines.size()) {
    pollfd fds[2];
    int nfds = 0;
    fds[nfds++] = {from_worker_, POLLIN, 0};
    if (written < outgoing.size()) fds[nfds++] = {to_worker_, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      stop();
      throw RuntimeError(str(who_, " gave no answer within its timeout_s = ",
                             timeout_s_, " s (", answers.size(), " of ", lines.size(), " answers received)",
                             context(answers.size()), "; stopped it"));
    }
    const int ready = ::poll(fds, nfds, static_cast<int>(std::min<int64_t>(left, 1000000)));
    if (ready < 0) {
      runtimeCheck(errno == EINTR, who_, ": poll: ", std::strerror(errno));
      continue;
    }
    if (nfds == 2 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(to_worker_, outgoing.data() + written, outgoing.size() - written);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_exited(str("while reading requests", context(answers.size())));
      if (n > 0) written += static_cast<size_t>(n);
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[65536];
      const ssize_t n = ::read(from_worker_, buffer, sizeof buffer);
      if (n == 0) fail_exited(str("after ", answers.size(), " of ", lines.size(), " answers", context(answers.size())));
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_exited("(read error)");
      if (n > 0) pending_.append(buffer, static_cast<size_t>(n));
      take_lines();
    }
  }
  return answers;
}

}  // namespace rayless
