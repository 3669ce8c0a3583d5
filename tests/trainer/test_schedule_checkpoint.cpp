#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "rayless/trainer/checkpoint.h"
#include "rayless/comm/communicator.h"
#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/trainer/lr_schedule.h"
#include "rayless/trainer/metrics.h"

namespace fs = std::filesystem;
using namespace rayless;

TEST_CASE("trainer: learning-rate schedules follow transformers' formulas") {
  // linear with warmup 2 of 10: 0, .5, then (10 - s) / 8
  CHECK(lr_multiplier(LrSchedule::Linear, 0, 2, 10) == Approx(0.0));
  CHECK(lr_multiplier(LrSchedule::Linear, 1, 2, 10) == Approx(0.5));
  CHECK(lr_multiplier(LrSchedule::Linear, 2, 2, 10) == Approx(1.0));
  CHECK(lr_multiplier(LrSchedule::Linear, 6, 2, 10) == Approx(0.5));
  CHECK(lr_multiplier(LrSchedule::Linear, 10, 2, 10) == Approx(0.0));
  // cosine: half a cosine after warmup
  CHECK(lr_multiplier(LrSchedule::Cosine, 2, 2, 10) == Approx(1.0));
  CHECK(lr_multiplier(LrSchedule::Cosine, 6, 2, 10) == Approx(0.5));
  CHECK(lr_multiplier(LrSchedule::Cosine, 4, 2, 10) == Approx(0.5 * (1 + std::cos(M_PI * 0.25))));
  CHECK(lr_multiplier(LrSchedule::Constant, 7, 0, 10) == Approx(1.0));
  CHECK(lr_multiplier(LrSchedule::Constant, 1, 4, 10) == Approx(0.25));
  OptimConfig optim;
  optim.warmup_ratio = 0.1;
  CHECK(warmup_steps_for(optim, 25) == 3);  // ceil(2.5)
  optim.warmup_steps = 5;
  CHECK(warmup_steps_for(optim, 25) == 5);
}

TEST_CASE("trainer: checkpoints are complete or absent, latest moves last, keep_last prunes") {
  const fs::path root = fs::temp_directory_path() / "rayless-test-ckpt";
  fs::remove_all(root);
  auto comm = make_single_communicator();
  auto write_state = [](const fs::path& dir) { write_text_atomically(dir / "trainer_state.json", "{}\n"); };
  auto nothing = [](const fs::path&) {};
  for (int step = 1; step <= 3; ++step)
    save_checkpoint(*comm, root, checkpoint_name(step, step, true), write_state, nothing, /*keep_last=*/2);
  CHECK(!fs::exists(root / "step-00000001"));
  CHECK(fs::exists(root / "step-00000002"));
  CHECK(latest_checkpoint(root).value() == root / "step-00000003");

  // a failure while filling leaves the previous checkpoint and `latest` untouched
  CHECK_THROWS(save_checkpoint(*comm, root, checkpoint_name(4, 4, true),
                               [](const fs::path&) { throw RuntimeError("disk full"); }, nothing, 2));
  CHECK(latest_checkpoint(root).value() == root / "step-00000003");
  CHECK(!fs::exists(root / "step-00000004"));
  CHECK(resolve_resume("auto", root).value() == root / "step-00000003");
  CHECK(!resolve_resume("", root).has_value());
  CHECK_THROWS_AS(resolve_resume((root / "nope").string(), root), InputError);
  CHECK(!resolve_resume("auto", root / "empty").has_value());
  CHECK(checkpoint_name(3, 7, false) == "step-00000003-micro-00000007");
}

TEST_CASE("trainer: metrics.jsonl drops steps after the resumed checkpoint") {
  const fs::path path = fs::temp_directory_path() / "rayless-test-metrics.jsonl";
  fs::remove(path);
  {
    MetricsLog log(path);
    for (int s = 1; s <= 5; ++s) log.write(s, {{"reward", s * 0.5}, {"kl", NAN}});
  }
  {
    MetricsLog log(path, /*resume_step=*/3);
    log.write(4, {{"reward", 9.0}});
  }
  const std::string text = read_text_file(path);
  CHECK(text.find("\"step\":5") == std::string::npos);
  CHECK(text.find("\"reward\":9.0") != std::string::npos);
  CHECK(text.find("\"kl\":null") != std::string::npos);  // NaN is not JSON
  size_t lines = std::count(text.begin(), text.end(), '\n');
  CHECK(lines == 4);
}
