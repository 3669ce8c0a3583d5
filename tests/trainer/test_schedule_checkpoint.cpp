#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rayless/trainer/checkpoint.h"
#include "rayless/comm/communicator.h"
#include "rayless/base/config.h"
#include "rayless/base/error.h"
#include "rayless/base/files.h"
#include "rayless/trainer/lr_schedule.h"
#include "rayless/trainer/metrics.h"
#include "rayless/trainer/torch_file.h"
#include "rayless/hf/safetensors.h"

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

TEST_CASE("trainer: --resume auto falls back past a damaged newest checkpoint, --resume PATH refuses it") {
  const fs::path root = fs::temp_directory_path() / "rayless-test-ckpt-damaged";
  fs::remove_all(root);
  auto comm = make_single_communicator();
  auto fill = [](const fs::path& dir) {
    save_safetensors(dir / "model.safetensors", {{"w", torch::arange(64, torch::kFloat32)}});
    write_text_atomically(dir / "trainer_state.json", "{\"optimizer_step\": 1}\n");
  };
  auto nothing = [](const fs::path&) {};
  for (int step = 1; step <= 3; ++step) save_checkpoint(*comm, root, checkpoint_name(step, step, true), fill, nothing, 5);
  const fs::path s1 = root / "step-00000001", s2 = root / "step-00000002", s3 = root / "step-00000003";
  CHECK(fs::exists(s3 / "manifest.json"));
  CHECK(checkpoint_problem(s3).empty());
  CHECK(latest_checkpoint(root).value() == s3);

  // model truncated: found by the safetensors header check and by the manifest's size
  fs::resize_file(s3 / "model.safetensors", fs::file_size(s3 / "model.safetensors") - 4);
  CHECK_THAT(checkpoint_problem(s3), Catch::Contains("step-00000003/model.safetensors"));
  CHECK(latest_checkpoint(root).value() == s2);
  CHECK(resolve_resume("auto", root).value() == s2);
  CHECK_THROWS_WITH(resolve_resume(s3.string(), root), Catch::Contains("step-00000003/model.safetensors"));
  // garbage trainer_state.json in the next one: back to step 1
  write_text_atomically(s2 / "trainer_state.json", "garbage {");
  CHECK_THAT(checkpoint_problem(s2), Catch::Contains("trainer_state.json: not valid JSON"));
  CHECK(latest_checkpoint(root).value() == s1);
  // a file of another size than written (same format, so only the manifest can tell)
  { std::ofstream(s1 / "optimizer.pt", std::ios::app) << "x"; }
  CHECK(checkpoint_problem(s1).empty());  // not listed in the manifest: written after it
  write_text_atomically(s1 / "trainer_state.json", "{\"optimizer_step\": 10}\n");
  CHECK_THAT(checkpoint_problem(s1), Catch::Contains("trainer_state.json: 23 bytes, but the checkpoint wrote 22"));
  CHECK_THROWS_AS(latest_checkpoint(root), InputError);
  fs::remove_all(root);
}

TEST_CASE("trainer: a save clears what kills left behind: .tmp- directories, .latest.tmp files, half-deleted step-*") {
  const fs::path root = fs::temp_directory_path() / "rayless-test-ckpt-leftovers";
  fs::remove_all(root);
  fs::create_directories(root / ".tmp-removing-step-00000001");
  fs::create_directories(root / ".tmp-step-00000009");
  fs::create_directories(root / "step-00000002");  // no trainer_state.json: deletion in place was cut short
  write_text_atomically(root / "step-00000002" / "config.json", "{}");
  write_text_atomically(root / ".latest.tmp.4242", "");
  auto comm = make_single_communicator();
  auto write_state = [](const fs::path& dir) { write_text_atomically(dir / "trainer_state.json", "{}\n"); };
  save_checkpoint(*comm, root, checkpoint_name(3, 3, true), write_state, [](const fs::path&) {}, 2);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(root)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"latest", "step-00000003"});
  fs::remove_all(root);
}

TEST_CASE("trainer: metrics.jsonl: a failed write is an error naming the file, a torn line is dropped on resume") {
  // /dev/full: every write fails with ENOSPC
  MetricsLog full("/dev/full");
  CHECK_THROWS_WITH(full.write(1, {{"reward", 1.0}}), Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));

  const fs::path path = fs::temp_directory_path() / "rayless-test-metrics-torn.jsonl";
  fs::remove(path);
  {
    MetricsLog log(path);
    for (int s = 1; s <= 3; ++s) log.write(s, {{"reward", 0.5}});
  }
  { std::ofstream(path, std::ios::app) << "{\"step\":4,\"rew"; }  // a kill in the middle of a write
  {
    MetricsLog log(path, /*resume_step=*/3);
    log.write(4, {{"reward", 1.0}});
  }
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    CHECK(line.find("\"rew\"") == std::string::npos);
    CHECK_THAT(line, Catch::Contains("\"step\":" + std::to_string(lines) + "}"));
  }
  CHECK(lines == 4);
}

TEST_CASE("trainer: torch files (optimizer.pt, grads, reference): a full disk is an error naming the file, not an abort") {
  // torch::save(value, "/dev/full") ends in std::terminate (its zip writer throws again while
  // unwinding); through the checked sink the same failure is one RuntimeError with the reason.
  const std::vector<torch::Tensor> tensors{torch::arange(100000, torch::kFloat32), torch::ones({3, 4})};
  CHECK_THROWS_AS(save_torch_file(tensors, "/dev/full"), RuntimeError);
  CHECK_THROWS_WITH(save_torch_file(tensors, "/dev/full"),
                    Catch::Contains("/dev/full") && Catch::Contains("No space left on device"));
  CHECK_THROWS_WITH(save_torch_file(tensors, "/nonexistent-dir/grads.pt"),
                    Catch::Contains("/nonexistent-dir/grads.pt") && Catch::Contains("No such file"));

  // what it writes, torch::load reads back: the same tensors as a file torch::save wrote itself
  const fs::path ours = fs::temp_directory_path() / "rayless-test-torch-file.pt";
  const fs::path torchs = fs::temp_directory_path() / "rayless-test-torch-file-reference.pt";
  save_torch_file(tensors, ours);
  torch::save(tensors, torchs.string());
  std::vector<torch::Tensor> from_ours, from_torchs;
  torch::load(from_ours, ours.string());
  torch::load(from_torchs, torchs.string());
  REQUIRE(from_ours.size() == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    CHECK(torch::equal(from_ours[i], tensors[i]));
    CHECK(torch::equal(from_ours[i], from_torchs[i]));
  }
  fs::remove(ours);
  fs::remove(torchs);
}
