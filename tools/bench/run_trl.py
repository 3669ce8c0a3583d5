#!/usr/bin/env python3
"""Runs TRL's GRPOTrainer on the CPU or one CUDA GPU with the benchmark's shared setup and writes
metrics.jsonl under the same names rayless uses ("step", "reward", "step_time", "time/generation",
"time/train", "completions/total_tokens", "memory/peak_rss_mb", and on a GPU
"memory/gpu_peak_allocated_mb" and "memory/gpu_peak_reserved_mb": torch.cuda.max_memory_allocated and
max_memory_reserved, the caching allocator's peaks since the start), so one summariser reads both tools.

Timing is taken from outside TRL, without changing what it computes:
  * step_time: wall time between the ends of consecutive optimizer steps (the first from train start),
    as rayless measures it;
  * time/generation: the time spent in GRPOTrainer._generate_and_score_completions (sampling, reward,
    old/ref log-prob passes when TRL needs them), as rayless's generate_and_score;
  * time/train: step_time - time/generation;
  * completions/total_tokens and reward: counted by the length reward itself, which sees every
    completion's token ids (up to and including EOS, as rayless counts them).
On a GPU each of these clocks is read after torch.cuda.synchronize(), so queued kernels count where
they were launched. run_info.json gets every GRPOConfig setting (defaults included) and the versions.
Run it with .venv-trl/bin/python (see tools/bench/compare.sh), or on the GPU machine with python3 and
the carried wheels (tools/gpu/compare_trl.sh).
"""
import argparse
import json
import os
import resource
import sys
import time


def parse_args(argv=None):
    """Parses run_trl.py's arguments (argv=None: sys.argv). compare.py calls it too, with the arguments it
    is about to pass, to read back what TRL will be given for its equal-settings table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="HF model directory written by `rayless-bench init-model`")
    p.add_argument("--prompts", required=True, help="JSONL prompts with a 'prompt' field")
    p.add_argument("--output", required=True, help="run directory (metrics.jsonl goes here)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: the first CUDA GPU")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads of this process")
    p.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], default="float32",
                   help="dtype the model is loaded in")
    p.add_argument("--bf16", choices=["true", "false"], required=True,
                   help="bfloat16 autocast with float32 weights (GRPOConfig.bf16); required, compare.py gives "
                        "both tools the same value")
    p.add_argument("--gradient-checkpointing", choices=["true", "false"], required=True,
                   help="required, as GRPOConfig would default to true: compare.py gives both tools the "
                        "same value")
    p.add_argument("--num-generations", type=int, required=True)
    p.add_argument("--max-completion-length", type=int, required=True)
    p.add_argument("--per-device-train-batch-size", type=int, required=True)
    p.add_argument("--gradient-accumulation-steps", type=int, default=1)
    p.add_argument("--learning-rate", type=float, required=True)
    p.add_argument("--lr-scheduler-type", default="constant")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--num-iterations", type=int, required=True)
    p.add_argument("--loss-type", required=True)
    p.add_argument("--beta", type=float, required=True)
    p.add_argument("--temperature", type=float, required=True)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = no top-k cut")
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--length-target", type=int, required=True)
    args = p.parse_args(argv)
    args.gradient_checkpointing = args.gradient_checkpointing == "true"
    args.bf16 = args.bf16 == "true"
    return args


def grpo_config_kwargs(args):
    """Every GRPOConfig argument this script sets. A function of its own so that compare.py can show
    exactly these values, next to rayless's, without importing TRL."""
    # taken as given on the command line (compare.py passes every one of them explicitly)
    passed_through = ["seed", "bf16", "per_device_train_batch_size", "gradient_accumulation_steps", "gradient_checkpointing",
                      "num_generations", "max_completion_length", "learning_rate", "lr_scheduler_type",
                      "weight_decay", "max_grad_norm", "num_iterations", "loss_type", "beta", "temperature",
                      "top_p", "top_k", "max_steps"]
    # use_vllm: GRPOConfig's default, written out: transformers' generate is the generator compared
    fixed = dict(output_dir=os.path.join(args.output, "trl"), use_cpu=args.device == "cpu", use_vllm=False,
                 warmup_steps=0, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, fp16=False,
                 dataloader_num_workers=0, log_completions=False)
    return {**fixed, **{name: getattr(args, name) for name in passed_through}}


def main():
    args = parse_args()
    # Nothing may come from the network: the model, tokenizer and data are all local files.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("WANDB_DISABLED", "true")

    import torch

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    os.makedirs(args.output, exist_ok=True)
    dataset = load_dataset("json", data_files=args.prompts, split="train")
    dataset = dataset.select_columns(["prompt"])
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype))

    # Per-generation records written by the reward function; keyed by the optimizer step it serves.
    generations = {}
    trainer_ref = {}

    def length_reward(completions, completion_ids, **kwargs):
        # Same definition as rayless's built-in "length" reward with length_unit = "tokens".
        rewards = [-abs(args.length_target - len(ids)) for ids in completion_ids]
        step = trainer_ref["trainer"].state.global_step + 1
        generations[step] = {
            "reward": sum(rewards) / len(rewards),
            "tokens": sum(len(ids) for ids in completion_ids),
            "completions": len(completion_ids),
        }
        return [float(r) for r in rewards]

    config = GRPOConfig(**grpo_config_kwargs(args))
    on_gpu = args.device == "cuda"

    def now():
        if on_gpu:
            torch.cuda.synchronize()  # what was queued before this point is done before it is timed
        return time.perf_counter()

    class StepTimer(TrainerCallback):
        """Wall time per optimizer step and the generation share of it."""

        def __init__(self):
            self.generation_seconds = 0.0
            self.last_end = None
            self.rows = []

        def on_train_begin(self, *a, **k):
            self.last_end = now()

        def on_step_end(self, a, state, control, **k):
            end = now()
            step_time = end - self.last_end
            self.last_end = end
            step = state.global_step
            row = {
                "step": step,
                "step_time": step_time,
                "time/generation": self.generation_seconds,
                "time/train": step_time - self.generation_seconds,
                "memory/peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            }
            if on_gpu:
                row["memory/gpu_peak_allocated_mb"] = torch.cuda.max_memory_allocated() / 2**20
                row["memory/gpu_peak_reserved_mb"] = torch.cuda.max_memory_reserved() / 2**20
            self.generation_seconds = 0.0
            if step in generations:
                row["reward"] = generations[step]["reward"]
                row["completions/total_tokens"] = float(generations[step]["tokens"])
                row["tokens_per_second"] = row["completions/total_tokens"] / step_time
            self.rows.append(row)
            with open(os.path.join(args.output, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(row) + "\n")

    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=length_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer_ref["trainer"] = trainer

    # Time generation + scoring by wrapping the bound method on this instance (TRL's code is unchanged).
    generate_and_score = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **k):
        t0 = now()
        try:
            return generate_and_score(*a, **k)
        finally:
            timer.generation_seconds += now() - t0

    trainer._generate_and_score_completions = timed_generate_and_score

    open(os.path.join(args.output, "metrics.jsonl"), "w").close()
    trainer.train()
    n_params = sum(p.numel() for p in model.parameters())
    info = {
        "tool": "trl",
        "threads": torch.get_num_threads(),
        "parameters": n_params,
        "gradient_checkpointing": config.gradient_checkpointing,
        # read from the model's layers after training: shows that TRL applied the setting, not only stored it
        "gradient_checkpointing_active": any(
            getattr(m, "gradient_checkpointing", False) is True for m in trainer.model.modules()),
        "versions": {
            "trl": __import__("trl").__version__,
            "transformers": __import__("transformers").__version__,
            "datasets": __import__("datasets").__version__,
            "accelerate": __import__("accelerate").__version__,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "python": sys.version.split()[0],
        },
        "device": torch.cuda.get_device_name(0) if on_gpu else "cpu",
        # every setting GRPOTrainer ran with, GRPOConfig's defaults included
        "grpo_config": json.loads(json.dumps(config.to_dict(), default=str)),
    }
    with open(os.path.join(args.output, "run_info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"run_trl: {len(timer.rows)} steps, metrics in {args.output}/metrics.jsonl", flush=True)


if __name__ == "__main__":
    main()
