#include "rayless/trainer/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "rayless/comm/communicator.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/base/log.h"

namespace fs = std::filesystem;

namespace rayless {
namespace {
constexpr const char* kLatestFile = "latest";
constexpr const char* kStateFile = "trainer_state.json";

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
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);  // leftovers of a crash while writing this very checkpoint
    fs::remove_all(final_dir, ignored);  // an older run's checkpoint of the same step (we resumed before it)
    fs::create_directories(tmp_dir);
  }
  comm.barrier();
  fill_each_rank(tmp_dir);
  if (comm.rank() == 0) fill_rank0(tmp_dir);
  comm.barrier();  // every rank's files are in place
  if (comm.rank() == 0) {
    for (const auto& entry : fs::directory_iterator(tmp_dir)) fsync_path(entry.path());
    fs::rename(tmp_dir, final_dir);
    fsync_path(root);
    write_text_atomically(root / kLatestFile, name + "\n");
    std::vector<fs::path> all = complete_checkpoints(root);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) {
      if (all[i] == final_dir) continue;
      std::error_code ignored;
      fs::remove_all(all[i], ignored);
    }
  }
  comm.barrier();  // nobody moves on (or exits) before the checkpoint is complete
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& root) {
  const fs::path pointer = root / kLatestFile;
  if (!fs::exists(pointer)) return std::nullopt;
  std::string name = read_text_file(pointer);
  name.erase(name.find_last_not_of(" \n\r\t") + 1);
  const fs::path dir = root / name;
  inputCheck(!name.empty() && is_complete_checkpoint(dir), pointer.string(), " names \"", name,
             "\", which is not a complete checkpoint");
  return dir;
}

std::optional<fs::path> resolve_resume(const std::string& resume, const fs::path& root) {
  if (resume.empty()) return std::nullopt;
  if (resume == "auto") return latest_checkpoint(root);
  const fs::path dir(resume);
  inputCheck(fs::is_directory(dir), "--resume ", resume, ": no such checkpoint directory");
  inputCheck(is_complete_checkpoint(dir), "--resume ", resume, ": not a complete checkpoint (no ", kStateFile, ")");
  return dir;
}

}  // namespace rayless
