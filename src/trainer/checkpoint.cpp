#include "rayless/trainer/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "rayless/comm/communicator.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/log.h"
#include "rayless/hf/safetensors.h"

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace rayless {
namespace {
constexpr const char* kLatestFile = "latest";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kManifestFile = "manifest.json";  // every file's size, written before the rename

bool is_complete_checkpoint(const fs::path& dir) { return fs::is_regular_file(dir / kStateFile); }

// Complete checkpoints under root, oldest first (names sort by step).
std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> out;
  if (!fs::is_directory(root)) return out;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step-", 0) == 0 && is_complete_checkpoint(entry.path()))
      out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// manifest.json: {"files": {relative path: size in bytes}} of everything the ranks wrote, so that a
// file truncated or replaced later is found before anything is loaded from it.
void write_manifest(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files[fs::relative(entry.path(), dir).generic_string()] = entry.file_size();
  write_text_atomically(dir / kManifestFile, nlohmann::json{{"files", files}}.dump(1) + "\n");
}

// Deletes a checkpoint directory so that a kill in the middle never leaves a half-deleted step-*:
// it is first renamed to a .tmp- name (atomic), which the next save clears if the kill came later.
void remove_checkpoint_directory(const fs::path& dir) {
  if (!fs::exists(dir)) return;
  const fs::path doomed = dir.parent_path() / (".tmp-removing-" + dir.filename().string());
  std::error_code ignored;
  fs::remove_all(doomed, ignored);
  fs::rename(dir, doomed);
  fs::remove_all(doomed, ignored);
}

// Rank 0, before a save: what crashes left under root: .tmp-* directories (a checkpoint being written
// or removed), .latest.tmp.* files, and step-* directories without trainer_state.json (half-deleted
// by rayless versions that deleted in place). None is ever named by `latest`.
void clear_leftovers(const fs::path& root) {
  std::vector<fs::path> leftovers;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(".latest.tmp", 0) == 0 ||
        (name.rfind("step-", 0) == 0 && entry.is_directory() && !is_complete_checkpoint(entry.path())))
      leftovers.push_back(entry.path());
  }
  for (const fs::path& path : leftovers) {
    std::error_code ignored;
    if (path.filename().string().rfind("step-", 0) == 0)
      remove_checkpoint_directory(path);
    else
      fs::remove_all(path, ignored);
  }
}
}  // namespace

std::string checkpoint_name(int64_t optimizer_step, int64_t micro_step, bool at_optimizer_boundary) {
  char buffer[64];
  if (at_optimizer_boundary)
    std::snprintf(buffer, sizeof buffer, "step-%08lld", static_cast<long long>(optimizer_step));
  else
    std::snprintf(buffer, sizeof buffer, "step-%08lld-micro-%08lld", static_cast<long long>(optimizer_step),
                  static_cast<long long>(micro_step));
  return buffer;
}

fs::path save_checkpoint(Communicator& comm, const fs::path& root, const std::string& name,
                         const std::function<void(const fs::path&)>& fill_rank0,
                         const std::function<void(const fs::path&)>& fill_each_rank, int64_t keep_last) {
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / (".tmp-" + name);
  if (comm.rank() == 0) {
    fs::create_directories(root);
    clear_leftovers(root);
    remove_checkpoint_directory(final_dir);  // an older run's checkpoint of the same step (we resumed before it)
    fs::create_directories(tmp_dir);
  }
  comm.barrier();
  fill_each_rank(tmp_dir);
  if (comm.rank() == 0) fill_rank0(tmp_dir);
  comm.barrier();  // every rank's files are in place
  if (comm.rank() == 0) {
    write_manifest(tmp_dir);
    for (const auto& entry : fs::recursive_directory_iterator(tmp_dir)) fsync_path(entry.path());
    fs::rename(tmp_dir, final_dir);
    fsync_path(root);
    write_text_atomically(root / kLatestFile, name + "\n");
    std::vector<fs::path> all = complete_checkpoints(root);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) {
      if (all[i] == final_dir) continue;
      remove_checkpoint_directory(all[i]);
    }
  }
  comm.barrier();  // nobody moves on (or exits) before the checkpoint is complete
  return final_dir;
}

std::string checkpoint_problem(const fs::path& dir) {
  if (!is_complete_checkpoint(dir)) return str(dir.string(), ": not a complete checkpoint (no ", kStateFile, ")");
  try {
    // each file's own format first (says what is wrong), then the sizes written at save time (catch a
    // short optimizer.pt, which only loading would find)
    for (const auto& entry : fs::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      const fs::path& file = entry.path();
      if (file.extension() == ".json") {
        const auto parsed = nlohmann::json::parse(read_text_file(file), nullptr, false);
        if (parsed.is_discarded()) return str(file.string(), ": not valid JSON");
        if (!parsed.is_object()) return str(file.string(), ": not a JSON object");
      } else if (file.extension() == ".safetensors") {
        read_safetensors_header(file);  // checks every tensor's bytes are there
      }
    }
    const fs::path manifest = dir / kManifestFile;
    if (fs::exists(manifest)) {
      const auto listed = nlohmann::json::parse(read_text_file(manifest), nullptr, false);
      if (listed.is_discarded() || !listed.contains("files") || !listed["files"].is_object())
        return str(manifest.string(), ": not a valid manifest");
      for (auto it = listed["files"].begin(); it != listed["files"].end(); ++it) {
        const fs::path file = dir / it.key();
        std::error_code error;
        const auto size = fs::file_size(file, error);
        if (error) return str(file.string(), ": missing");
        if (!it->is_number_unsigned() || size != it->get<uint64_t>())
          return str(file.string(), ": ", size, " bytes, but the checkpoint wrote ", it->dump(), " (truncated or replaced)");
      }
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::optional<fs::path> latest_checkpoint(const fs::path& root, bool warn) {
  const fs::path pointer = root / kLatestFile;
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_text_file(pointer);
  name.erase(name.find_last_not_of(" \n\r\t") + 1);
  const fs::path named = root / name;
  std::string problem = name.empty() ? str(pointer.string(), " is empty") : checkpoint_problem(named);
  if (problem.empty()) return named;
  // fall back to the newest older checkpoint that checks out; never to one newer than `latest`
  const std::vector<fs::path> all = complete_checkpoints(root);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!name.empty() && it->filename().string() >= name) continue;
    const std::string older_problem = checkpoint_problem(*it);
    if (!older_problem.empty()) {
      if (warn) log_warn(str("--resume auto: skipping ", it->string(), ": ", older_problem));
      continue;
    }
    if (warn)
      log_warn(str("--resume auto: ", pointer.string(), " names ", name, ", which is damaged (", problem,
                   "); falling back to ", it->filename().string()));
    return *it;
  }
  throw InputError(str("--resume auto: ", pointer.string(), " names ", name, ", which is damaged (", problem,
                       "), and no older checkpoint under ", root.string(), " is whole"));
}

std::optional<fs::path> resolve_resume(const std::string& resume, const fs::path& root) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") return latest_checkpoint(root);
  const fs::path dir(resume);
  inputCheck(fs::is_directory(dir), "--resume ", resume, ": no such checkpoint directory");
  inputCheck(is_complete_checkpoint(dir), "--resume ", resume, ": not a complete checkpoint (no ", kStateFile, ")");
  const std::string problem = checkpoint_problem(dir);
  inputCheck(problem.empty(), "--resume ", resume, ": ", problem);
  return dir;
}

}  // namespace rayless
