// One run per directory. `rayless train` starts in an empty directory, continues the run a directory
// holds (--resume auto|PATH), or, with --overwrite, renames the directory that holds an old run to
// DIR.replaced-YYYYMMDDTHHMMSSZ and starts in a new, empty DIR. It never appends a new run's metrics to
// an old run's, and never leaves an old run's checkpoints or rollouts beside a new run's.
//
//   what DIR holds            (none)           --resume auto                --resume PATH   --overwrite
//   nothing                   start            start ("nothing to resume")  resume PATH     start
//   a run with a checkpoint   exit 2           resume the newest            resume PATH     move, start
//   a run, no checkpoint      exit 2           move, start                  resume PATH     move, start
//
// "A run" is a metrics.jsonl with a record in it, or anything under checkpoints/ or rollouts/ (a run
// that failed in its first step leaves an empty metrics.jsonl, and a plain rerun goes ahead). A run without a checkpoint
// was stopped before its first one: --resume auto moves it aside and starts from the beginning, so a
// job killed or preempted early still goes on when requeued.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

namespace rayless {

class Communicator;

// What the directory holds of a run, e.g. "metrics.jsonl, checkpoints/" ("" when nothing).
std::string run_traces(const std::filesystem::path& dir);

// Collective. Rank 0 looks at the directory and decides (the file system is shared); every rank
// gets the same answer or the same InputError. Returns the checkpoint to resume, or none (a fresh
// start in an existing, empty-of-runs directory).
std::optional<std::filesystem::path> prepare_run_directory(Communicator& comm, const std::filesystem::path& dir,
                                                           const std::string& resume, bool overwrite);

}  // namespace rayless
