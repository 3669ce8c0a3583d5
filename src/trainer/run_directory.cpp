#include "rayless/trainer/run_directory.h"

#include <cctype>
#include <ctime>
#include <fstream>

#include "rayless/base/error.h"
#include "rayless/base/log.h"
#include "rayless/comm/communicator.h"
#include "rayless/trainer/checkpoint.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {

bool has_entries(const fs::path& dir) {
  std::error_code error;
  return fs::is_directory(dir, error) && fs::directory_iterator(dir, error) != fs::directory_iterator();
}

bool holds_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char c;
  while (in.get(c))
    if (!std::isspace(static_cast<unsigned char>(c))) return true;
  return false;
}

std::string utc_stamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

// Renames dir to dir.replaced-STAMP (a free name) and makes dir again, empty.
fs::path move_aside(const fs::path& dir) {
  const fs::path clean = dir.lexically_normal().native().back() == '/' ? dir.lexically_normal().parent_path()
                                                                       : dir.lexically_normal();
  fs::path target = clean.string() + ".replaced-" + utc_stamp();
  for (int n = 2; fs::exists(target); ++n) target = clean.string() + ".replaced-" + utc_stamp() + "-" + std::to_string(n);
  std::error_code error;
  fs::rename(clean, target, error);
  inputCheck(!error, "--overwrite: cannot rename ", clean.string(), " to ", target.string(), ": ", error.message());
  fs::create_directories(clean);
  return target;
}

enum Decision : int { kStartFresh = 1, kResume = 2, kRefuse = 3 };

// Rank 0's decision; `message` says why when it refuses.
Decision decide(const fs::path& dir, const std::string& resume, bool overwrite, std::string& message) {
  const std::string traces = run_traces(dir);
  if (!resume.empty() && resume != "auto") return kResume;  // an explicit checkpoint: resolved by every rank
  if (resume == "auto" && latest_checkpoint(dir / "checkpoints", /*warn=*/false)) return kResume;
  if (traces.empty()) {
    if (resume == "auto") log_info(str("rayless train: nothing to resume in ", dir.string(), ": starting fresh"));
    return kStartFresh;
  }
  if (overwrite) {
    const fs::path moved = move_aside(dir);
    log_info(str("rayless train: --overwrite: moved the old run (", traces, ") to ", moved.string(), "; starting fresh"));
    return kStartFresh;
  }
  if (resume == "auto") {
    // a run stopped before its first checkpoint (killed, preempted): a requeued job must go on, so it
    // starts again from step 0; what the interrupted attempt wrote is kept aside, not deleted
    const fs::path moved = move_aside(dir);
    log_info(str("rayless train: ", dir.string(), " holds a run (", traces, ") stopped before its first checkpoint: moved it to ",
                 moved.string(), "; starting from the beginning"));
    return kStartFresh;
  }
  message = str(dir.string(), " already holds a run (", traces,
                "): pass --resume auto to continue it, or --overwrite to move it aside and start fresh");
  return kRefuse;
}

}  // namespace

std::string run_traces(const fs::path& dir) {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  std::error_code error;
  // a metrics.jsonl without a record is a run that failed in its first step: nothing to keep apart
  if (fs::exists(dir / "metrics.jsonl", error) && holds_text(dir / "metrics.jsonl")) add("metrics.jsonl");
  if (has_entries(dir / "checkpoints")) add("checkpoints/");
  if (has_entries(dir / "rollouts")) add("rollouts/");
  return out;
}

std::optional<fs::path> prepare_run_directory(Communicator& comm, const fs::path& dir, const std::string& resume,
                                              bool overwrite) {
  std::string message;
  int decision = 0;
  std::string rank0_error;
  if (comm.rank() == 0) {
    try {
      fs::create_directories(dir);
      decision = decide(dir, resume, overwrite, message);
    } catch (const InputError& e) {
      decision = kRefuse;
      message = e.what();
    }
  }
  decision = static_cast<int>(global_max(comm, static_cast<double>(decision)));
  // every rank fails alike, so the job ends together; rank 0 (the lowest) prints the reason
  inputCheck(decision != kRefuse, comm.rank() == 0 ? message : std::string("the run directory was refused (rank 0 says why)"));
  if (decision == kStartFresh) return std::nullopt;
  return resolve_resume(resume, dir / "checkpoints");
}

}  // namespace rayless
