// `rayless train` for the resume tests, with one difference: rank 0 raises a real SIGTERM after
// micro-step K (--signal-at-micro-step K), through the Trainer's hook, so the run checkpoints at
// an exact place and exits 3 (--signal-count 2: a second SIGTERM at once, which stops without one).
// For the non-finite guard's test, --inf-loss-at-micro-step K (--inf-loss-rank R) makes the loss of
// micro-step K (0-based) on rank R infinite, through the Trainer's loss hook. The production binary has
// no such switch.
//   mpirun -np 2 train-until-signal --signal-at-micro-step 3 --config configs/ci-small.toml --output DIR
#include <algorithm>
#include <csignal>
#include <limits>

#include "cli/options.h"
#include "rayless/runtime/runtime.h"
#include "rayless/trainer/trainer.h"

int main(int argc, char** argv) {
  using namespace rayless;
  cli::Args args(argv, argv + argc);
  try {
    cli::po::options_description options("train-until-signal");
    TrainOptions train_options;
    int64_t signal_at = -1, signal_count = 1, inf_loss_rank = 0;
    std::vector<int64_t> inf_loss_at;
    options.add_options()("signal-at-micro-step", cli::po::value(&signal_at), "raise SIGTERM on rank 0 after it")(
        "inf-loss-at-micro-step", cli::po::value(&inf_loss_at)->composing(), "make that micro-step's loss infinite (repeatable)")(
        "inf-loss-rank", cli::po::value(&inf_loss_rank), "on this rank only (default 0)")(
        "signal-count", cli::po::value(&signal_count), "raise it this many times (2: the second means stop now)")(
        "config", cli::po::value(&train_options.config_path), "config TOML")(
        "set", cli::po::value(&train_options.overrides)->composing(), "section.key=value")(
        "output", cli::po::value(&train_options.output_dir), "run directory");
    cli::po::variables_map vm;
    if (!cli::parse_options(args, "train-until-signal [--signal-at-micro-step K] [--inf-loss-at-micro-step K] [rayless train options]",
                            options, vm))
      return 0;
    Runtime runtime;
    return run_spmd(runtime, [&] {
      TrainerHooks hooks;
      hooks.after_micro_step = [&](int64_t micro_step) {
        if (micro_step == signal_at && runtime.rank() == 0)
          for (int64_t i = 0; i < signal_count; ++i) std::raise(SIGTERM);
      };
      hooks.loss = [&](const torch::Tensor& loss, int64_t micro_step) {
        const bool force = runtime.rank() == inf_loss_rank &&
                           std::find(inf_loss_at.begin(), inf_loss_at.end(), micro_step) != inf_loss_at.end();
        return force ? loss * std::numeric_limits<double>::infinity() : loss;
      };
      Trainer trainer(runtime, train_options, hooks);
      return trainer.run();
    });
  } catch (const std::exception& e) {
    print_error(e.what());
    return exit_code_for(e);
  }
}
