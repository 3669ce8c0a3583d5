#include <cstdlib>
#include <filesystem>

#include "cli/options.h"
#include "rayless/base/config.h"
#include "rayless/runtime/runtime.h"
#include "rayless/runtime/signals.h"
#include "rayless/trainer/trainer.h"

namespace rayless::cli {

namespace {

// Flags that contradict each other, and --allow-config-change keys that are no keys: refused before
// anything is read or written (every rank sees the same, so one line, exit 2).
void check_train_flags(const TrainOptions& options) {
  inputCheck(options.resume.empty() || !options.overwrite, "train: --resume ", options.resume,
             " and --overwrite contradict each other (--resume continues the run in the directory, --overwrite moves "
             "it aside and starts fresh): pass one");
  inputCheck(options.profile_step >= 0, "train: --profile-step ", options.profile_step,
             " is not allowed: expected an optimizer step, 1 or more (0: none)");
  inputCheck(options.allow_config_changes.empty() || !options.resume.empty(),
             "train: --allow-config-change is for a resumed run: add --resume auto|PATH, or drop it");
  for (const std::string& key : options.allow_config_changes) {
    bool known = key.rfind("reward.workers.", 0) == 0 || key.rfind("reward.models.", 0) == 0;
    for (const ConfigField& field : config_fields()) known = known || field.name == key;
    inputCheck(known, "train: --allow-config-change ", key, ": no such config key (use the key the resume names, e.g. grpo.beta)");
  }
}

}  // namespace

int train(const Args& args) {
  // first: a stop signal from here on is held until training can checkpoint, not fatal (runtime/signals.h)
  StopSignalScope stop_signals;
  po::options_description options("rayless train");
  TrainOptions train_options;
  options.add_options()("config", po::value(&train_options.config_path), "config TOML (omit to use only defaults)")(
      "set", po::value(&train_options.overrides)->composing(), "override a key: section.key=value (repeatable)")(
      "output", po::value(&train_options.output_dir), "run directory (default: train.output_dir)")(
      "resume", po::value(&train_options.resume), "auto (newest complete checkpoint, if any) or a checkpoint directory")(
      "overwrite", po::bool_switch(&train_options.overwrite),
      "the run directory holds an old run: rename it to DIR.replaced-<UTC time> and start fresh")(
      "allow-config-change", po::value(&train_options.allow_config_changes)->composing(),
      "with --resume: let KEY differ from the checkpoint's config on purpose (repeatable; docs/hpc.md, Resuming)")(
      "profile-step", po::value(&train_options.profile_step),
      "run optimizer step N (generation included) under LibTorch's profiler: where its time went, per rank, into "
      "DIR/profile/step-N-rank-R.json (docs/gpu.md, Profiling)");
  po::variables_map vm;
  if (!parse_options(args, "mpirun -np N rayless train --config FILE [--set k=v ...] [--output DIR] [--resume auto|PATH "
                           "[--allow-config-change KEY ...]] [--overwrite]\n"
                           "exit codes: 0 done, 1 runtime failure, 2 bad input, 3 stopped by a signal after a checkpoint",
                     options, vm))
    return 0;
  // reward worker commands run in this working directory; $RAYLESS_CONFIG_DIR names the config's
  if (!train_options.config_path.empty())
    setenv("RAYLESS_CONFIG_DIR", std::filesystem::absolute(train_options.config_path).parent_path().c_str(), 1);
  Runtime runtime;
  return run_spmd(runtime, [&] {
    check_train_flags(train_options);
    announce_stop_signals_taken(runtime.control(), runtime.rank());  // a file it cannot write ends every rank
    return run_training(runtime, train_options);
  });
}

}  // namespace rayless::cli
