// Checkpoint directories: OUTPUT/checkpoints/step-NNNNNNNN/ holds the model as an HF directory,
// optimizer.pt, trainer_state.json (rank 0) and rank-RRRRR.json (+ grads-rank-RRRRR.pt when taken in
// the middle of gradient accumulation) from every rank. The directory is filled under a temporary name
// and renamed when every rank has written its part; only then does checkpoints/latest (a file holding
// the directory's name) move to it and old checkpoints beyond keep_last go. A crash at any moment leaves
// the previous complete checkpoint and `latest` intact.
#pragma once
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace rayless {

class Communicator;

// "step-00000012", or "step-00000012-micro-00000049" when taken between optimizer steps.
std::string checkpoint_name(int64_t optimizer_step, int64_t micro_step, bool at_optimizer_boundary);

// Collective: every rank calls it. fill_rank0 writes the shared files (model, optimizer, state) into
// the temporary directory; fill_each_rank writes that rank's own files. Returns the final path.
std::filesystem::path save_checkpoint(Communicator& comm, const std::filesystem::path& checkpoints_root,
                                      const std::string& name,
                                      const std::function<void(const std::filesystem::path&)>& fill_rank0,
                                      const std::function<void(const std::filesystem::path&)>& fill_each_rank,
                                      int64_t keep_last);

// What is wrong with a checkpoint directory, as "FILE: reason" ("" when it checks out): no
// trainer_state.json, a file missing or of another size than manifest.json recorded, a .json that does
// not parse, a .safetensors whose header or data does not check out. Reads no tensor data.
std::string checkpoint_problem(const std::filesystem::path& dir);

// --resume auto's checkpoint: the one `latest` names when it checks out; when it is damaged (or
// missing), the newest older complete checkpoint that checks out, with a warning naming the bad file
// (warn = false: silently). None without `latest`. InputError when no checkpoint checks out.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& checkpoints_root,
                                                       bool warn = true);

// --resume auto|PATH: auto = latest_checkpoint (none -> start fresh); PATH = that checkpoint
// directory (InputError naming the file when it is incomplete or damaged: no fallback).
std::optional<std::filesystem::path> resolve_resume(const std::string& resume,
                                                    const std::filesystem::path& checkpoints_root);

}  // namespace rayless
