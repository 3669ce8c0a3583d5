// External reward workers: one long-running process per rank, JSON lines over pipes, every wait
// bounded by poll() so a hung worker becomes an error instead of a hung training job.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <limits>
#include <optional>
#include <thread>

#include "rayless/base/error.h"
#include "rayless/rewards/rewards.h"

extern char** environ;

namespace rayless {
namespace {

using Clock = std::chrono::steady_clock;

std::string excerpt(const std::string& text, size_t limit = 120) {
  std::string out = text.size() > limit ? text.substr(0, limit) + "..." : text;
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
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

double reward_value(const nlohmann::json& value, bool* ok) {
  *ok = true;
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (value.is_number()) return value.get<double>();
  if (value.is_boolean()) return value.get<bool>() ? 1.0 : 0.0;
  *ok = false;
  return 0;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return str("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str("was killed by signal ", WTERMSIG(status));
  return "stopped";
}

}  // namespace

std::optional<std::vector<double>> parse_worker_answer(const std::string& line, size_t count, bool batched) {
  nlohmann::json answer;
  try {
    answer = nlohmann::json::parse(nan_tokens_to_null(line));
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
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
    : name_(std::move(name)), command_(std::move(command)), timeout_s_(timeout_s), batch_size_(batch_size) {
  // A worker that dies while we write must give EPIPE (an error we report), not kill this process.
  ::signal(SIGPIPE, SIG_IGN);
  int in_pipe[2], out_pipe[2];
  runtimeCheck(::pipe2(in_pipe, O_CLOEXEC) == 0 && ::pipe2(out_pipe, O_CLOEXEC) == 0, "reward worker: pipe: ",
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
    throw RuntimeError(str(who(), ": cannot start /bin/sh: ", std::strerror(rc)));
  }
  pid_ = pid;
  group_ = pid;
  to_worker_ = in_pipe[1];
  from_worker_ = out_pipe[0];
  ::fcntl(to_worker_, F_SETFL, ::fcntl(to_worker_, F_GETFL) | O_NONBLOCK);
  ::fcntl(from_worker_, F_SETFL, ::fcntl(from_worker_, F_GETFL) | O_NONBLOCK);
}

RewardWorker::~RewardWorker() { stop(); }

void RewardWorker::stop() {
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

void RewardWorker::fail_exited(const std::string& during) {
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
  throw RuntimeError(str(who(), " ", how, " ", during));
}

std::vector<std::string> RewardWorker::exchange(const std::vector<std::string>& lines) {
  if (pid_ <= 0 || to_worker_ < 0) throw RuntimeError(str(who(), " is not running"));
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
      throw RuntimeError(str(who(), " gave no answer within its timeout_s = ",
                             timeout_s_, " s (", answers.size(), " of ", lines.size(), " answers received); stopped it"));
    }
    const int ready = ::poll(fds, nfds, static_cast<int>(std::min<int64_t>(left, 1000000)));
    if (ready < 0) {
      runtimeCheck(errno == EINTR, "reward worker: poll: ", std::strerror(errno));
      continue;
    }
    if (nfds == 2 && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(to_worker_, outgoing.data() + written, outgoing.size() - written);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_exited("while reading requests");
      if (n > 0) written += static_cast<size_t>(n);
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buffer[65536];
      const ssize_t n = ::read(from_worker_, buffer, sizeof buffer);
      if (n == 0) fail_exited(str("after ", answers.size(), " of ", lines.size(), " answers"));
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_exited("(read error)");
      if (n > 0) pending_.append(buffer, static_cast<size_t>(n));
      take_lines();
    }
  }
  return answers;
}

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
    stop();
    return InputError(str(who(), " answered request ", request + 1, " with \"", excerpt(line),
                          "\": expected ", expected));
  };
  std::vector<double> out(n);
  if (batch_size_ <= 0) {
    std::vector<std::string> lines(n);
    for (size_t i = 0; i < n; ++i) lines[i] = dump(requests[i]) + "\n";
    const std::vector<std::string> answers = exchange(lines);
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
  const std::vector<std::string> answers = exchange(lines);
  for (size_t b = 0; b < lines.size(); ++b) {
    const size_t start = starts[b], count = std::min(n, start + static_cast<size_t>(batch_size_)) - start;
    const auto values = parse_worker_answer(answers[b], count, /*batched=*/true);
    if (!values) throw garbage(b, answers[b], str("one JSON object {\"rewards\": [", count, " numbers|null]}"));
    std::copy(values->begin(), values->end(), out.begin() + static_cast<std::ptrdiff_t>(start));
  }
  return out;
}

}  // namespace rayless
