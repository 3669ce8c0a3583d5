// The Trainer driven from C++ (no bash, no environment switches): hooks passed in are called after
// every micro-step, and a stop signal raised in a hook makes every rank checkpoint and return 3.
// Runs under mpiexec at np = 1..4 on configs/ci-small.toml.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "rayless/base/error.h"
#include "rayless/comm/communicator.h"
#include "mpi_test_runtime.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/step_read.h"
#include "rayless/trainer/trainer.h"

using namespace rayless;
using rayless::test::mpi;
using rayless::test::runtime;
namespace fs = std::filesystem;

namespace {

// One directory for all ranks: rank 0's pid, shared.
fs::path shared_temp_dir(const std::string& name) {
  long long pid = runtime().rank() == 0 ? static_cast<long long>(getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, runtime().world());
  return fs::temp_directory_path() / ("rayless-trainer-test-" + std::to_string(pid)) / name;
}

TrainOptions small_run(const fs::path& output, int64_t max_steps) {
  const std::string src = RAYLESS_SOURCE_DIR;
  TrainOptions options;
  options.config_path = src + "/configs/ci-small.toml";
  options.overrides = {"model.path=\"" + src + "/configs/models/tiny\"", "data.path=\"" + src + "/data/demo/prompts.jsonl\"",
                       "train.max_steps=" + std::to_string(max_steps), "grpo.num_iterations=1",
                       "grpo.steps_per_generation=1", "checkpoint.save_steps=100"};
  options.output_dir = output.string();
  return options;
}

int64_t lines_in(const fs::path& path) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

}  // namespace

TEST_CASE("trainer: Trainer::run calls the hook after every micro-step and logs every step") {
  const fs::path out = shared_temp_dir("hooks");
  std::vector<int64_t> seen;
  TrainerHooks hooks;
  hooks.after_micro_step = [&](int64_t micro_step) { seen.push_back(micro_step); };
  Trainer trainer(runtime(), small_run(out, 3), hooks);
  REQUIRE(trainer.run() == kExitOk);
  CHECK(seen == std::vector<int64_t>{1, 2, 3});
  mpi()->barrier();
  if (runtime().rank() == 0) {
    CHECK(lines_in(out / "metrics.jsonl") == 3);
    CHECK(fs::exists(out / "checkpoints" / "step-00000003" / "model.safetensors"));
  }
}

TEST_CASE("trainer: a SIGUSR1 raised in a hook on rank 0 stops every rank with a checkpoint (exit 3)") {
  const fs::path out = shared_temp_dir("signal");
  TrainerHooks hooks;
  hooks.after_micro_step = [&](int64_t micro_step) {
    if (micro_step == 1 && runtime().rank() == 0) std::raise(SIGUSR1);
  };
  Trainer trainer(runtime(), small_run(out, 4), hooks);
  REQUIRE(trainer.run() == kExitCheckpointedOnSignal);
  mpi()->barrier();
  if (runtime().rank() == 0) {
    CHECK(lines_in(out / "metrics.jsonl") == 1);
    std::ifstream latest(out / "checkpoints" / "latest");
    std::string name;
    latest >> name;
    CHECK(name == "step-00000001");
    std::error_code ignored;
    fs::remove_all(out.parent_path(), ignored);
  }
}

// Issue 48 §3: the guard's flags, the grad norm, the loss and the loss metrics of every micro-step
// reach the host in one read per optimizer step (two micro-steps per step here, μ = 2 reusing each
// generation of two micro-batches)
TEST_CASE("trainer: one read to the host per optimizer step") {
  const fs::path out = shared_temp_dir("one-read");
  TrainOptions options = small_run(out, 3);
  options.overrides.push_back("grpo.num_iterations=2");
  options.overrides.push_back("grpo.steps_per_generation=2");
  options.overrides.push_back("train.per_device_train_batch_size=2");
  options.overrides.push_back("train.gradient_accumulation_steps=2");
  int64_t micro_steps = 0;
  TrainerHooks hooks;
  hooks.after_micro_step = [&](int64_t) { ++micro_steps; };
  Trainer trainer(runtime(), options, hooks);
  const int64_t before = StepRead::reads();
  REQUIRE(trainer.run() == kExitOk);
  CHECK(StepRead::reads() - before == 3);
  CHECK(micro_steps == 6);
  mpi()->barrier();
  if (runtime().rank() == 0) {
    CHECK(lines_in(out / "metrics.jsonl") == 3);
    std::error_code ignored;
    fs::remove_all(out.parent_path(), ignored);
  }
}
