// A long-running helper process spoken to in JSON lines over pipes: started with /bin/sh -c COMMAND
// in a process group of its own, one request line in, one answer line out, every wait bounded by
// poll() so that a hung or dead process becomes an error instead of a hung training job. Reward
// workers (rewards.h), tool workers and environment workers (agent/tool_workers.h) are built on it.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace rayless {

class WorkerProcess {
 public:
  // `who` names the process in every error ("reward worker \"judge\" (python3 judge.py)"); `rank`
  // reaches it as RAYLESS_RANK. RuntimeError when /bin/sh cannot start.
  WorkerProcess(std::string command, double timeout_s, int rank, std::string who);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Writes the lines (each ends in '\n') while reading answers, and returns exactly lines.size()
  // answer lines. The clock (timeout_s) restarts at every answer. A process that exits, closes its
  // stdout or stays silent for timeout_s is stopped and a RuntimeError names it; `request_context`
  // (optional) adds what request i was about, e.g. " (tool \"add\" of row 3)", for the request that
  // had no answer.
  std::vector<std::string> exchange(const std::vector<std::string>& lines,
                                    const std::function<std::string(size_t request)>& request_context = {});
  // Closes stdin, gives the process half a second to exit, then kills its whole group.
  void stop();

  const std::string& who() const { return who_; }
  const std::string& command() const { return command_; }
  double timeout_s() const { return timeout_s_; }
  int pid() const { return pid_; }

 private:
  [[noreturn]] void fail_exited(const std::string& during);

  std::string command_;
  double timeout_s_;
  std::string who_;
  int pid_ = -1;
  int group_ = -1;        // its process group (= its pid), killed as a whole on stop
  int to_worker_ = -1;    // the process's stdin
  int from_worker_ = -1;  // the process's stdout
  std::string pending_;   // bytes read past the last complete line
};

// One answer line as JSON (keys in the order written), with Python's bare NaN / Infinity / -Infinity read as null; none when the
// line is not JSON.
std::optional<nlohmann::ordered_json> parse_answer_line(const std::string& line);

// At most `limit` characters of `text` on one line ("..." when cut): quotes a process's answer in errors.
std::string one_line_excerpt(const std::string& text, size_t limit = 120);

}  // namespace rayless
