#!/usr/bin/env python3
"""Side-by-side GRPO benchmark: TRL's GRPOTrainer vs rayless (1 and 2 ranks) over named scenarios.

  compare.py run            prepares the shared setup (models written by `rayless-bench init-model`, so
                            both tools load identical weights and the same tokenizer.json), prints the
                            equal-settings table, runs every (scenario, tool) and writes OUT/results.json
  compare.py run --dry-run  prints the equal-settings table and the plan, and runs nothing
  compare.py report         reads OUT/results.json and writes OUT/table.md and the reward plot (PNG)
  compare.py report --runs D1,D2,D3
                            median and min-max of the median step time over repeated full runs

A scenario fixes the model size, the lengths, the batch geometry, μ and gradient checkpointing; the
knobs in COMMON are the same in every scenario. Both tools get every knob explicitly, so that no result
depends on a default that differs between them (GRPOConfig and rayless both default to gradient
checkpointing on, and rayless to bf16 autocast).

Both commands are called by tools/bench/compare.sh, the one command that reproduces docs/benchmarks.md.
`run` and `report` need .venv-trl's Python (trl, transformers, matplotlib); `run --dry-run` needs only
the standard library.

`run --scenario-set gpu` runs GPU_SCENARIOS on one CUDA GPU (TRL and one rayless rank; peak GPU memory
from each tool's caching allocator); tools/gpu/compare_trl.sh calls it on a lent GPU machine, and with
`--scenario-set gpu-dry-run` (the same knobs on the tiny model, on the CPU) from ctest. There a run may
outlive its time (--deadline-s): --keep-going records it as unfinished and goes on (docs/gpu.md).
"""
import argparse
import dataclasses
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tools", "bench")
sys.path.insert(0, HERE)
import run_trl  # noqa: E402  (standard library only at import time: its argument parser is read back here)

# The same in every scenario and for every tool.
COMMON = {
    "learning_rate": 1e-3,
    "loss_type": "dapo",
    "beta": 0.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,  # 0 = no top-k cut
    "seed": 42,
    "dtype": "float32",
    "prompts": "data/demo/prompts.jsonl",
    "gradient_accumulation_steps": 1,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "lr_scheduler_type": "constant",
}
# rayless truncates prompts at this many tokens; TRL 1.x has no prompt limit. Equal as long as every
# prompt is shorter, which the equal-settings table checks.
RAYLESS_MAX_PROMPT_LENGTH = 128


@dataclasses.dataclass(frozen=True)
class Scenario:
    size: str                     # model: tools/bench/models/<size>.json
    num_generations: int          # G, completions per prompt
    max_completion_length: int
    length_target: int            # the length reward's target, in tokens
    global_batch_size: int        # completions per optimizer step over all processes
    num_iterations: int           # μ, optimizer steps per generation
    gradient_checkpointing: bool  # the same value for both tools
    bf16: bool                    # bfloat16 autocast, float32 weights: the same value for both tools
    steps: int                    # optimizer steps run
    warmup_steps: int             # leading steps left out of the timing (not a learning-rate warm-up)
    device: str = "cpu"           # "cpu" or "cuda": where both tools run

    @property
    def name(self):
        checkpointing = "-gc" if self.gradient_checkpointing else ""
        autocast = "-bf16" if self.bf16 else ""
        return f"{self.size}-{self.max_completion_length}-mu{self.num_iterations}{checkpointing}{autocast}"

    def knobs(self):
        return {"name": self.name, **dataclasses.asdict(self)}


def scenario(size, G, max_len, target, mu, steps, warmup, gc=False, bf16=False, batch=16, device="cpu"):
    return Scenario(size=size, num_generations=G, max_completion_length=max_len, length_target=target,
                    global_batch_size=batch, num_iterations=mu, gradient_checkpointing=gc, bf16=bf16, steps=steps,
                    warmup_steps=warmup, device=device)


# At μ = 4 a generation serves 4 optimizer steps, so the warm-up is one whole generation cycle and the
# timed window holds whole cycles.
SCENARIOS = [
    # short completions: per-call overheads dominate
    scenario("tiny", G=4, max_len=32, target=16, mu=1, steps=24, warmup=2),
    scenario("tiny", G=4, max_len=32, target=16, mu=4, steps=28, warmup=4),
    scenario("small", G=4, max_len=32, target=16, mu=1, steps=8, warmup=2),
    scenario("small", G=4, max_len=32, target=16, mu=4, steps=12, warmup=4),
    # the realistic setting: long completions, 8 per prompt
    scenario("small", G=8, max_len=256, target=200, mu=1, steps=5, warmup=1),
    scenario("small", G=8, max_len=256, target=200, mu=4, steps=8, warmup=4),
    # gradient checkpointing on for both tools
    scenario("small", G=4, max_len=32, target=16, mu=1, steps=8, warmup=2, gc=True),
    scenario("small", G=8, max_len=256, target=200, mu=1, steps=5, warmup=1, gc=True),
    # bfloat16 autocast on for both tools (the CPU's bfloat16 matmul units: AMX, AVX512-BF16)
    scenario("tiny", G=4, max_len=32, target=16, mu=1, steps=24, warmup=2, bf16=True),
    scenario("small", G=4, max_len=32, target=16, mu=1, steps=8, warmup=2, bf16=True),
    scenario("small", G=8, max_len=256, target=200, mu=1, steps=5, warmup=1, bf16=True),
    scenario("small", G=8, max_len=256, target=200, mu=4, steps=8, warmup=4, bf16=True),
]
# On one GPU (tools/gpu/compare_trl.sh): the Qwen2.5-0.5B shape, float32 weights under bfloat16 autocast
# and gradient checkpointing for both tools (TRL's usual GPU setting), 256- and 1,024-token completions
# at μ = 1 and 2. Few steps, sized for one 10-minute device command: the first step (μ = 1) or the
# first generation cycle (μ = 2) is the warm-up (CUDA context, cuBLAS, the caching allocator's growth),
# the rest is one timed cycle. Ordered cheapest first, so that a deadline cuts the longest runs.
GPU_SCENARIOS = [
    scenario("qwen2.5-0.5b", G=8, max_len=256, target=200, mu=1, steps=2, warmup=1, gc=True, bf16=True, device="cuda"),
    scenario("qwen2.5-0.5b", G=8, max_len=256, target=200, mu=2, steps=4, warmup=2, gc=True, bf16=True, device="cuda"),
    scenario("qwen2.5-0.5b", G=8, max_len=1024, target=800, mu=1, steps=2, warmup=1, gc=True, bf16=True, device="cuda"),
    scenario("qwen2.5-0.5b", G=8, max_len=1024, target=800, mu=2, steps=4, warmup=2, gc=True, bf16=True, device="cuda"),
]
# The GPU set's CPU dry run (ctest gpu-compare-trl-dry-run): the same knobs on the tiny model, short.
GPU_DRY_RUN_SCENARIOS = [
    scenario("tiny", G=4, max_len=16, target=8, mu=2, steps=4, warmup=2, gc=True, bf16=True, batch=8),
]
SCENARIO_SETS = {"cpu": SCENARIOS, "gpu": GPU_SCENARIOS, "gpu-dry-run": GPU_DRY_RUN_SCENARIOS}
ALL_SCENARIOS = SCENARIOS + GPU_SCENARIOS + GPU_DRY_RUN_SCENARIOS  # the order reports list them in

# rayless-1-padded: one rank with train.padding_free = false, TRL's padded [B, P + T] log-prob layout,
# to show how much of the difference the packed log-prob pass makes.
TOOLS = ["trl", "rayless-1-padded", "rayless-1", "rayless-2"]
# one GPU: one rayless rank (NCCL holds one rank per device)
DEFAULT_TOOLS = {"cpu": TOOLS, "gpu": ["trl", "rayless-1"], "gpu-dry-run": ["trl", "rayless-1"]}

# Targets checked by the summary after the report table.
TARGET_SPEEDUP = 3.0     # rayless-1 step time at most 1/3 of TRL's
TARGET_RSS_RATIO = 0.7   # rayless-1 peak RSS at most 0.7 x TRL's
TARGET_SCALING = 1.8     # step time at 1 rank / at 2 ranks, same global batch
# on the GPU (issue #48): a whole step at least 5x faster than TRL without vLLM, at no more GPU memory
TARGET_GPU_SPEEDUP = 5.0
TARGET_GPU_MEMORY_RATIO = 1.0


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def machine_info():
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "os": platform.platform(), "python": platform.python_version()}


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------
# Selection: which scenarios and tools a run covers

def select_scenarios(names=None, sizes=None, mus=None, lengths=None, scenario_set="cpu"):
    """The set's scenarios filtered by name, model size, μ and completion length (each None = no
    filter), in the set's order."""
    candidates = SCENARIO_SETS[scenario_set]
    known = {s.name for s in candidates}
    unknown = set(names or []) - known
    if unknown:
        sys.exit(f"bench: unknown scenario(s) {', '.join(sorted(unknown))} in set {scenario_set}; "
                 f"known: {', '.join(s.name for s in candidates)}")
    chosen = [s for s in candidates
              if (names is None or s.name in names) and (sizes is None or s.size in sizes)
              and (mus is None or s.num_iterations in mus)
              and (lengths is None or s.max_completion_length in lengths)]
    if not chosen:
        sys.exit("bench: no scenario left after --scenarios/--sizes/--mus/--lengths")
    return chosen


def select_tools(text):
    tools = text.split(",")
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        sys.exit(f"bench: unknown tool(s) {', '.join(unknown)}; known: {', '.join(TOOLS)}")
    return tools


def processes_of(tool):
    return 1 if tool == "trl" else int(tool.split("-")[1])


def model_path(out, size):
    # absolute: a relative path in a config is relative to the config's directory (the run directory's parent)
    return os.path.abspath(os.path.join(out, "models", size))


def run_path(out, scen, tool):
    return os.path.join(out, "runs", f"{scen.name}-{tool}")


def prompts_path():
    return os.path.join(ROOT, COMMON["prompts"])


def prompt_token_lengths(path):
    """Prompt lengths in tokens. The benchmark models use the byte tokenizer (no BOS, no post-processor)
    and no chat template, so a prompt's tokens are the bytes of its "prompt" field."""
    with open(path) as f:
        return [len(json.loads(line)["prompt"].encode("utf-8")) for line in f if line.strip()]


# ---------------------------------------------------------------------------------------------------
# What each tool is given

def trl_arguments(scen, model_dir, run_dir, threads):
    """run_trl.py's arguments: every knob explicit, none left to run_trl.py's or GRPOConfig's defaults."""
    c = COMMON
    return ["--model", model_dir, "--prompts", prompts_path(), "--output", run_dir, "--device", scen.device,
            "--threads", str(threads), "--dtype", c["dtype"],
            "--bf16", "true" if scen.bf16 else "false",
            "--gradient-checkpointing", "true" if scen.gradient_checkpointing else "false",
            "--num-generations", str(scen.num_generations),
            "--max-completion-length", str(scen.max_completion_length),
            # one process, so its batch is the whole global batch
            "--per-device-train-batch-size", str(scen.global_batch_size),
            "--gradient-accumulation-steps", str(c["gradient_accumulation_steps"]),
            "--learning-rate", str(c["learning_rate"]), "--lr-scheduler-type", c["lr_scheduler_type"],
            "--weight-decay", str(c["weight_decay"]), "--max-grad-norm", str(c["max_grad_norm"]),
            "--num-iterations", str(scen.num_iterations), "--loss-type", c["loss_type"], "--beta", str(c["beta"]),
            "--temperature", str(c["temperature"]), "--top-p", str(c["top_p"]), "--top-k", str(c["top_k"]),
            "--max-steps", str(scen.steps), "--seed", str(c["seed"]), "--length-target", str(scen.length_target)]


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    return repr(value)


def rayless_config(scen, model_dir, processes, threads, padding_free):
    c = COMMON
    v = toml_value
    return f"""# written by tools/bench/compare.py, scenario {scen.name}
[model]
path = {v(model_dir)}
dtype = {v(c['dtype'])}
device = {v(scen.device)}

[tokenizer]
path = ""
chat_template = "none"

[data]
path = {v(prompts_path())}
max_prompt_length = {RAYLESS_MAX_PROMPT_LENGTH}

[generation]
max_completion_length = {scen.max_completion_length}
temperature = {v(c['temperature'])}
top_p = {v(c['top_p'])}
top_k = {c['top_k']}

[reward]
functions = ["length"]
length_target = {scen.length_target}
length_unit = "tokens"

[grpo]
num_generations = {scen.num_generations}
num_iterations = {scen.num_iterations}
loss_type = {v(c['loss_type'])}
beta = {v(c['beta'])}

[optim]
learning_rate = {v(c['learning_rate'])}
lr_scheduler_type = {v(c['lr_scheduler_type'])}
warmup_steps = 0
weight_decay = {v(c['weight_decay'])}
max_grad_norm = {v(c['max_grad_norm'])}

[train]
max_steps = {scen.steps}
seed = {c['seed']}
per_device_train_batch_size = {scen.global_batch_size // processes}
gradient_accumulation_steps = {c['gradient_accumulation_steps']}
bf16 = {v(scen.bf16)}
bf16_products = "auto"
gradient_checkpointing = {v(scen.gradient_checkpointing)}
padding_free = {v(padding_free)}

[checkpoint]
save_steps = 0
keep_last = 1
# a run stopped at the harness's deadline ends at once, without writing a checkpoint
save_on_signal = false

[distributed]
threads_per_rank = {threads}
"""


def rayless_tool_config(scen, tool, model_dir, threads):
    return rayless_config(scen, model_dir, processes_of(tool), threads, padding_free=not tool.endswith("-padded"))


# ---------------------------------------------------------------------------------------------------
# The equal-settings table: each tool's column is read back from what that tool is given (run_trl.py's
# parser and GRPOConfig arguments; the parsed rayless TOML), not from COMMON and Scenario, so a knob
# that one side drops or hard-codes shows up.

def trl_settings(scen, out, threads):
    args = run_trl.parse_args(trl_arguments(scen, model_path(out, scen.size), "RUN_DIR", threads))
    cfg = run_trl.grpo_config_kwargs(args)
    processes = 1  # run_trl.py is one plain Python process (no accelerate launch)
    per_process = cfg["per_device_train_batch_size"]
    return {
        "model": os.path.relpath(args.model, ROOT),
        "prompts": os.path.relpath(args.prompts, ROOT),
        "chat template": "none",  # the prompts are plain strings, so TRL applies no chat template
        "max prompt length (tokens)": "no limit",
        "device": "cpu" if cfg["use_cpu"] else "cuda",
        "dtype": args.dtype,
        "bf16 autocast": cfg["bf16"],
        "gradient checkpointing": cfg["gradient_checkpointing"],
        "processes": processes,
        "threads per process": args.threads,
        "completions per process per micro-step": per_process,
        "gradient accumulation steps": cfg["gradient_accumulation_steps"],
        "global batch (completions per optimizer step)": per_process * processes * cfg["gradient_accumulation_steps"],
        "num_generations (G)": cfg["num_generations"],
        "num_iterations (μ)": cfg["num_iterations"],
        "max_completion_length": cfg["max_completion_length"],
        "length reward target (tokens)": args.length_target,
        "temperature": cfg["temperature"],
        "top_p": cfg["top_p"],
        "top_k": cfg["top_k"],
        "loss_type": cfg["loss_type"],
        "beta": cfg["beta"],
        "learning_rate": cfg["learning_rate"],
        "lr scheduler": cfg["lr_scheduler_type"],
        "lr warm-up steps": cfg["warmup_steps"],
        "weight_decay": cfg["weight_decay"],
        "max_grad_norm": cfg["max_grad_norm"],
        "seed": cfg["seed"],
        "optimizer steps": cfg["max_steps"],
        "log-prob layout": "padded [B, P + T]",  # TRL's only layout
        # torch's autocast multiplies bfloat16 operands with LibTorch's bfloat16 kernels
        "bfloat16 products": "LibTorch's bfloat16 kernels" if cfg["bf16"] else "none (float32)",
        # GRPOConfig's default, written out: transformers' generate is the one generator on the GPU machine
        "generation": "transformers generate (use_vllm false)" if not cfg["use_vllm"] else "vLLM",
    }


def rayless_settings(scen, tool, out, threads):
    t = tomllib.loads(rayless_tool_config(scen, tool, model_path(out, scen.size), threads))
    processes = processes_of(tool)  # mpirun -np
    train, gen, optim = t["train"], t["generation"], t["optim"]
    per_process = train["per_device_train_batch_size"]
    return {
        "model": os.path.relpath(t["model"]["path"], ROOT),
        "prompts": os.path.relpath(t["data"]["path"], ROOT),
        "chat template": t["tokenizer"]["chat_template"],
        "max prompt length (tokens)": t["data"]["max_prompt_length"],
        "device": t["model"]["device"],
        "dtype": t["model"]["dtype"],
        "bf16 autocast": train["bf16"],
        "gradient checkpointing": train["gradient_checkpointing"],
        "processes": processes,
        "threads per process": t["distributed"]["threads_per_rank"],
        "completions per process per micro-step": per_process,
        "gradient accumulation steps": train["gradient_accumulation_steps"],
        "global batch (completions per optimizer step)": per_process * processes * train["gradient_accumulation_steps"],
        "num_generations (G)": t["grpo"]["num_generations"],
        "num_iterations (μ)": t["grpo"]["num_iterations"],
        "max_completion_length": gen["max_completion_length"],
        "length reward target (tokens)": t["reward"]["length_target"],
        "temperature": gen["temperature"],
        "top_p": gen["top_p"],
        "top_k": gen["top_k"],
        "loss_type": t["grpo"]["loss_type"],
        "beta": t["grpo"]["beta"],
        "learning_rate": optim["learning_rate"],
        "lr scheduler": optim["lr_scheduler_type"],
        "lr warm-up steps": optim["warmup_steps"],
        "weight_decay": optim["weight_decay"],
        "max_grad_norm": optim["max_grad_norm"],
        "seed": train["seed"],
        "optimizer steps": train["max_steps"],
        "log-prob layout": "packed (padding_free)" if train["padding_free"] else "padded [B, P + T]",
        "bfloat16 products": bfloat16_products(train, t["model"]["device"]) if train["bf16"] else "none (float32)",
        "generation": "rayless's own decoder",
    }


def cpu_has_bfloat16_units():
    """AVX512-BF16 or AMX-BF16 in /proc/cpuinfo's flags, as rayless's CPUID check finds them."""
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def bfloat16_products(train, device="cpu"):
    """What rayless's train.bf16_products resolves to on this CPU (ops/kernel_plan.h); on a GPU
    the setting does not apply and autocast takes LibTorch's bfloat16 kernels."""
    if device != "cpu":
        return "LibTorch's bfloat16 kernels"
    setting = train.get("bf16_products", "auto")
    if setting == "auto":
        setting = "bfloat16" if cpu_has_bfloat16_units() else "float32"
    return "LibTorch's bfloat16 kernels" if setting == "bfloat16" else "float32 kernels on bfloat16 values"


def expected_difference(knob, longest_prompt):
    """Why a knob may differ between TRL and a rayless variant, or None if it must not."""
    if knob in ("processes", "completions per process per micro-step"):
        return "rayless-2 splits the same global batch over 2 ranks"
    if knob == "log-prob layout":
        return "the subject of rayless-1-padded vs rayless-1"
    if knob == "generation":
        return "each tool's own sampler; TRL without vLLM, as issue #48 asks"
    if knob == "bfloat16 products":
        return ("no bfloat16 units on this CPU: rayless runs the same arithmetic (exact products, float32 "
                "sums, one rounding) in float32 kernels, LibTorch emulates it (train.bf16_products = auto)")
    if knob == "max prompt length (tokens)" and longest_prompt <= RAYLESS_MAX_PROMPT_LENGTH:
        return f"no prompt is cut (longest: {longest_prompt} tokens)"
    return None


def show(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def combine(values_by_tool):
    """One value when every rayless variant gets the same, else 'value (tools)' per distinct value."""
    tools_by_value = {}
    for tool, value in values_by_tool.items():
        tools_by_value.setdefault(show(value), []).append(tool)
    if len(tools_by_value) == 1:
        return next(iter(tools_by_value))
    return "; ".join(f"{value} ({', '.join(tools)})" for value, tools in tools_by_value.items())


def knob_comparison(scen, rayless_tools, out, threads, longest_prompt):
    """{knob: (TRL value, rayless value, verdict)} for one scenario."""
    trl = trl_settings(scen, out, threads)
    rayless = {tool: rayless_settings(scen, tool, out, threads) for tool in rayless_tools}
    comparison = {}
    for knob, trl_value in trl.items():
        values = {tool: settings[knob] for tool, settings in rayless.items()}
        if all(value == trl_value for value in values.values()):
            verdict = "same"
        else:
            reason = expected_difference(knob, longest_prompt)
            verdict = f"by design: {reason}" if reason else "DIFFERS"
        comparison[knob] = (show(trl_value), combine(values), verdict)
    return comparison


def equal_settings(scenarios, tools, out, threads):
    """Rows {scenario, setting, trl, rayless, equal}: first the knobs that read the same in every
    scenario (scenario "all"), then each scenario's own."""
    rayless_tools = [t for t in tools if t != "trl"] or [t for t in TOOLS if t != "trl"]
    longest_prompt = max(prompt_token_lengths(prompts_path()))
    by_scenario = {s.name: knob_comparison(s, rayless_tools, out, threads, longest_prompt) for s in scenarios}
    knobs = list(next(iter(by_scenario.values())))
    common = [k for k in knobs if len({c[k] for c in by_scenario.values()}) == 1]

    def row(scenario_name, knob, comparison):
        trl, rayless, verdict = comparison[knob]
        return {"scenario": scenario_name, "setting": knob, "trl": trl, "rayless": rayless, "equal": verdict}

    first = next(iter(by_scenario.values()))
    rows = [row("all", k, first) for k in common]
    for name, comparison in by_scenario.items():
        rows += [row(name, k, comparison) for k in knobs if k not in common]
    return rows


def settings_markdown(rows):
    return markdown_table(["scenario", "setting", "TRL", "rayless", "equal?"],
                          [[r["scenario"], r["setting"], r["trl"], r["rayless"], r["equal"]] for r in rows])


def plan_markdown(scenarios, tools, threads):
    rows = [[s.name, tool, f"{processes_of(tool)} × {threads}", s.steps, s.warmup_steps, s.steps - s.warmup_steps]
            for s in scenarios for tool in tools]
    total_steps = sum(s.steps for s in scenarios) * len(tools)
    return (markdown_table(["scenario", "tool", "processes × threads", "steps", "warm-up (untimed)", "timed"], rows)
            + f"\n{len(rows)} runs, {total_steps} optimizer steps in all\n")


# ---------------------------------------------------------------------------------------------------
# Running

class RunFailed(Exception):
    """A command that failed or outran its time; the message names it and ends with its log's tail."""


def run_logged(cmd, log_path, env=None, timeout=None):
    """Runs cmd with output to log_path; returns (wall seconds, load before, load after). Raises
    RunFailed when it fails, or when it is still running after timeout seconds: then its process group
    (mpirun and its ranks, or TRL's Python) is stopped first, so nothing is left holding the GPU."""
    load_before = load_average()
    t0 = time.perf_counter()
    with open(log_path, "w") as out:
        # its own process group, not its own session: the device tool still ends it with this command
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, process_group=0)
        try:
            returncode = proc.wait(timeout=timeout)
            failure = f"command failed ({returncode})" if returncode != 0 else None
        except subprocess.TimeoutExpired:
            stop_process_group(proc)
            failure = f"stopped at the deadline, after {timeout:.0f} s"
    if failure:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-25:])
        raise RunFailed(f"{failure}: {' '.join(cmd)}\n--- {log_path} (tail)\n{tail}")
    return time.perf_counter() - t0, load_before, load_average()


def stop_process_group(proc):
    """SIGTERM to the group (mpirun passes it to its ranks; rayless ends at once with save_on_signal
    off), SIGKILL to whatever is left 15 s later."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def thread_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(threads)
    return env


def require_binaries(args, tools):
    bench = os.path.join(os.path.dirname(args.rayless), "rayless-bench")  # writes the models for both tools
    needed = [args.rayless, bench]
    missing = [p for p in needed if not os.access(p, os.X_OK)]
    if any(t != "trl" for t in tools) and shutil.which(args.mpirun) is None:
        missing.append(args.mpirun)
    if missing:
        sys.exit(f"bench: not found or not executable: {', '.join(missing)}")


def prepare_models(rayless, out, sizes):
    for size in sizes:
        target = model_path(out, size)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # init-model lives in rayless-bench, beside the trainer binary
        bench = os.path.join(os.path.dirname(rayless), "rayless-bench")
        cmd = [bench, "init-model", "--config-json", os.path.join(HERE, "models", f"{size}.json"),
               "--out", target, "--seed", "1234", "--tokenizer", "byte"]
        try:
            run_logged(cmd, os.path.join(out, "models", f"{size}.log"))
        except RunFailed as e:
            sys.exit(f"bench: {e}")


def tool_command(tool, scen, run_dir, args):
    model_dir = model_path(args.out, scen.size)
    if tool == "trl":
        script = os.path.join(HERE, "run_trl.py")
        return [sys.executable, script] + trl_arguments(scen, model_dir, run_dir, args.threads)
    config_path = run_dir + ".toml"
    with open(config_path, "w") as f:
        f.write(rayless_tool_config(scen, tool, model_dir, args.threads))
    return [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(processes_of(tool)),
            args.rayless, "train", "--config", config_path, "--output", run_dir]


def metric_rows(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_metrics(run_dir, expected_steps):
    rows = metric_rows(run_dir)
    if len(rows) != expected_steps:
        sys.exit(f"bench: {run_dir}/metrics.jsonl has {len(rows)} steps, expected {expected_steps}")
    return rows


# a run is not started with less time than this left before the deadline
MIN_SECONDS_FOR_A_RUN = 30


def run_one(tool, scen, args, deadline=None):
    """One (scenario, tool) run, summarised. With --keep-going, a run that fails, outruns the deadline
    or has no time left comes back as {"error": why, ...} (with the step times it logged) and the
    benchmark goes on: on a lent GPU the other runs are worth keeping."""
    run_dir = run_path(args.out, scen, tool)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir)
    cmd = tool_command(tool, scen, run_dir, args)
    identity = {"scenario": scen.name, "knobs": scen.knobs(), "tool": tool, "size": scen.size,
                "mu": scen.num_iterations, "steps": scen.steps, "warmup_steps": scen.warmup_steps,
                "processes": processes_of(tool), "threads_per_process": args.threads}
    timeout = None if deadline is None else deadline - time.time()
    if timeout is not None and timeout < MIN_SECONDS_FOR_A_RUN:
        log(f"{scen.name} {tool}: skipped, {max(timeout, 0):.0f} s left before the deadline")
        return {**identity, "error": "skipped: no time left before the deadline"}
    log(f"{scen.name} {tool}: {scen.steps} steps (load {load_average():.1f}"
        + ("" if timeout is None else f", {timeout:.0f} s left") + ")")
    try:
        wall, load_before, load_after = run_logged(cmd, run_dir + ".log", env=thread_env(args.threads), timeout=timeout)
    except RunFailed as e:
        if not args.keep_going:
            sys.exit(f"bench: {e}")
        rows = metric_rows(run_dir)
        log(f"  FAILED after {len(rows)} of {scen.steps} steps: {str(e).splitlines()[0]}")
        return {**identity, "error": str(e), "steps_done": len(rows),
                "step_time_by_step": [[r["step"], r["step_time"]] for r in rows]}
    result = summarise(read_metrics(run_dir, scen.steps), scen.warmup_steps, scen.global_batch_size)
    result.update(identity)
    result.update({"process_wall_s": wall, "load_before": load_before, "load_after": load_after})
    run_info = os.path.join(run_dir, "run_info.json")  # run_trl.py's: versions, applied gradient checkpointing
    if os.path.exists(run_info):
        with open(run_info) as f:
            result["run_info"] = json.load(f)
        applied = result["run_info"].get("gradient_checkpointing_active")
        if applied is not None and applied != scen.gradient_checkpointing:
            log(f"  WARNING: gradient checkpointing asked {scen.gradient_checkpointing}, the model reports {applied}")
    resolved = os.path.join(run_dir, "config.resolved.toml")  # rayless's: every setting, defaults included
    if os.path.exists(resolved):
        with open(resolved, "rb") as f:
            result["resolved_config"] = tomllib.load(f)
    gpu = ("" if result["peak_gpu_reserved_mb"] is None else
           f", peak GPU {result['peak_gpu_allocated_mb']:.0f} MiB allocated / {result['peak_gpu_reserved_mb']:.0f} reserved")
    log(f"  median step {result['median_step_s']:.3f}s, {result['completion_tokens_per_s']:.1f} tok/s, "
        f"gen {result['generation_share']:.0%}, peak RSS {result['peak_rss_mb']:.0f} MB{gpu}, wall {wall:.0f}s")
    return result


def summarise(rows, warmup, global_batch_size):
    measured = rows[warmup:]
    step_times = [r["step_time"] for r in measured]
    total_time = sum(step_times)
    gen = sum(r.get("time/generation", 0.0) for r in measured)
    tokens = sum(r.get("completions/total_tokens", 0.0) for r in measured)
    generations = sum(1 for r in measured if "completions/total_tokens" in r)
    return {
        "median_step_s": statistics.median(step_times),
        "mean_step_s": total_time / len(measured),
        "generation_s_per_step": gen / len(measured),
        "train_s_per_step": (total_time - gen) / len(measured),
        "generation_share": gen / total_time,
        "completion_tokens_per_s": tokens / total_time,
        "mean_completion_length": tokens / max(1, generations) / global_batch_size,
        "peak_rss_mb": max(r.get("memory/peak_rss_mb", 0.0) for r in rows),
        # the caching allocator's peaks on a GPU (rayless's and torch.cuda's own counters); None on the CPU
        "peak_gpu_allocated_mb": largest(rows, "memory/gpu_peak_allocated_mb"),
        "peak_gpu_reserved_mb": largest(rows, "memory/gpu_peak_reserved_mb"),
        "reward_by_step": [[r["step"], r["reward"]] for r in rows if r.get("reward") is not None],
        "step_time_by_step": [[r["step"], r["step_time"]] for r in rows],
    }


def largest(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return max(values) if values else None


def versions(rayless):
    import importlib
    out = {}
    for module, name in (("trl", "trl"), ("datasets", "datasets"), ("transformers", "transformers"),
                         ("accelerate", "accelerate"), ("torch", "torch (TRL side)")):
        try:
            out[name] = importlib.import_module(module).__version__
        except ImportError:
            out[name] = "not installed"
    if out["torch (TRL side)"] != "not installed":
        import torch
        out["cuda (TRL side)"] = torch.version.cuda or "none"
    try:
        text = subprocess.run([rayless, "version"], capture_output=True, text=True, check=True).stdout
        out.update(rayless_version_fields(text))
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


# `rayless version` lines whose name is more than one word; any other line is "<name> <value>"
VERSION_LINE_NAMES = ("onednn kernel cache",)


def rayless_version_fields(text):
    """{name: value} for each line of `rayless version`: a known name of several words, a kernel plan
    entry as "kernel <entry>" (one line per op, docs/kernels.md), else the first word."""
    fields = {}
    for line in text.splitlines():
        if line.startswith("kernel "):
            name = " ".join(line.split(" ")[:2])
        else:
            name = next((n for n in VERSION_LINE_NAMES if line.startswith(n + " ")), line.partition(" ")[0])
        fields[name] = line[len(name):].strip()
    return fields


def count_parameters(model_dir):
    """Parameters stored in the model directory's safetensors files (header only: 8-byte size + JSON).
    With tied embeddings the LM head is not stored, so the shared matrix counts once."""
    import struct
    total = 0
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, name), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for key, entry in header.items():
            if key != "__metadata__":
                total += math.prod(entry["shape"])
    return total


def source_commit():
    """The commit the tree is at: git's where there is a .git, else what tools/gpu/fetch_wheels.sh
    recorded before the tree was carried to the GPU machine (the copy there has no .git)."""
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return head + (" (with uncommitted changes)" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    recorded = os.path.join(ROOT, ".gpu-deps", "source-commit")
    if os.path.exists(recorded):
        with open(recorded) as f:
            return f.read().strip() + " (as tools/gpu/fetch_wheels.sh recorded it)"
    return "unknown"


def write_results(out, results):
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


def cmd_run(args):
    args.out = os.path.abspath(args.out)
    args.rayless = os.path.abspath(args.rayless)
    scenarios = select_scenarios(split_or_none(args.scenarios), split_or_none(args.sizes),
                                 split_or_none(args.mus, int), split_or_none(args.lengths, int), args.scenario_set)
    tools = select_tools(args.tools or ",".join(DEFAULT_TOOLS[args.scenario_set]))
    device = scenarios[0].device  # one device per scenario set
    settings = equal_settings(scenarios, tools, args.out, args.threads)
    print("Equal settings (each column read back from what that tool is given):\n")
    print(settings_markdown(settings))
    print(plan_markdown(scenarios, tools, args.threads))
    differing = [f"{r['scenario']}: {r['setting']}" for r in settings if r["equal"] == "DIFFERS"]
    if differing:
        message = f"bench: TRL and rayless would get different settings: {'; '.join(differing)}"
        if args.dry_run:
            print(message)
        else:
            sys.exit(message)
    if args.dry_run:
        return

    require_binaries(args, tools)
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    deadline = None if args.deadline_s is None else started + args.deadline_s
    prompt_lengths = prompt_token_lengths(prompts_path())
    rates = gpu_machine_figures() if device == "cuda" else machine_rates(args.threads)
    results = {"commit": source_commit(), "scenario_set": args.scenario_set, "device": device,
               "common": COMMON, "scenarios": [s.knobs() for s in scenarios], "tools": tools,
               "equal_settings": settings, "prompt_tokens_mean": statistics.mean(prompt_lengths),
               "machine": {**machine_info(), **rates}, "versions": versions(args.rayless),
               "threads_per_process": args.threads, "deadline_s": args.deadline_s,
               "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_at_start": load_average(), "runs": []}
    sizes = sorted({s.size for s in scenarios})
    prepare_models(args.rayless, args.out, sizes)
    results["parameters"] = {size: count_parameters(model_path(args.out, size)) for size in sizes}
    results["model_configs"] = {}
    for size in sizes:
        with open(os.path.join(model_path(args.out, size), "config.json")) as f:
            results["model_configs"][size] = json.load(f)
    for scen in scenarios:
        for tool in tools:
            results["runs"].append(run_one(tool, scen, args, deadline))
            write_results(args.out, results)  # after every run, so an interrupted benchmark keeps what it has
    results["load_at_end"] = load_average()
    results["total_wall_s"] = time.time() - started
    write_results(args.out, results)
    failed = [f"{r['scenario']} {r['tool']}" for r in results["runs"] if "error" in r]
    log(f"done in {results['total_wall_s'] / 60:.1f} min: {args.out}/results.json"
        + (f"; did not finish: {', '.join(failed)}" if failed else ""))
    if failed:
        sys.exit(1)


def gpu_machine_figures():
    """tools/bench/gpu_machine.py's description of GPU 0 and its bfloat16 matmul rate, measured in a
    process of its own so that this one holds no CUDA context while the tools run."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, "gpu_machine.py")], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench: tools/bench/gpu_machine.py failed (is there a CUDA GPU?):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def split_or_none(text, kind=str):
    return None if text is None else [kind(x) for x in text.split(",") if x]


# ---------------------------------------------------------------------------------------------------
# Reporting

def load_results(out):
    with open(os.path.join(out, "results.json")) as f:
        return upgrade_legacy(json.load(f))


def upgrade_legacy(results):
    """results.json written before scenarios existed has one "settings" dict for every run: give its
    runs the scenario names and knobs they would have now. Gradient checkpointing was not set then
    (None: unknown), so the names carry no -gc."""
    settings = results.get("settings")
    if settings is None:
        return results
    for run in results["runs"]:
        if "knobs" in run:
            continue
        knobs = {"size": run["size"], "num_generations": settings["num_generations"],
                 "max_completion_length": settings["max_completion_length"],
                 "length_target": settings["length_target"], "global_batch_size": settings["global_batch_size"],
                 "num_iterations": run["mu"], "gradient_checkpointing": None, "steps": run["steps"],
                 "warmup_steps": run["warmup_steps"]}
        knobs["name"] = f"{run['size']}-{knobs['max_completion_length']}-mu{run['mu']}"
        run["knobs"], run["scenario"] = knobs, knobs["name"]
    results.setdefault("common", {k: v for k, v in settings.items() if k in COMMON})
    return results


def scenario_order(name):
    names = [s.name for s in ALL_SCENARIOS]
    return (names.index(name), "") if name in names else (len(names), name)


def tool_order(tool):
    return TOOLS.index(tool) if tool in TOOLS else len(TOOLS)


def achieved_gflops(run, parameters, prompt_tokens):
    """(train, generation) GFLOP/s of one run, estimated from the usual 2·P FLOPs per token per forward.

    P = parameters stored in the model's safetensors files (results["parameters"]). With tied
    embeddings the matrix is stored once, so it counts once, as the LM head's matmul; the embedding
    lookup itself is no matmul and counts nothing.

    train      = 6·P·trained tokens / train time (forward 2·P + backward 4·P per token), where per
                 optimizer step trained tokens = global batch × (mean prompt tokens + mean completion
                 length) and train time = step time - generation time. Mean prompt tokens: the mean byte
                 length of the prompts file's "prompt" field (byte tokenizer, no chat template, no BOS).
    generation = 2·P·generated tokens / generation time, generated tokens = completion tokens sampled.

    These are useful-work rates, and lower bounds of what the CPU computed. Left out:
      * padding: TRL and rayless-1-padded compute on [B, P + T] rows, only real tokens count here;
      * gradient checkpointing's recomputed forward (+2·P per trained token): a -gc scenario shows its
        cost as a lower train rate;
      * attention's length-dependent FLOPs (small next to P at these lengths);
      * in generation: the prompt prefill, scoring, and at μ > 1 the old-policy log-prob pass (2·P per
        prompt + completion token, once per generation), all of which both tools time as generation.
    Several processes: the rate is summed over them (the whole global batch over the wall time).
    """
    batch = run["knobs"]["global_batch_size"]
    trained_tokens_per_step = batch * (prompt_tokens + run["mean_completion_length"])
    # completion tok/s × mean step time = completion tokens per step, averaged over the timed steps
    generated_tokens_per_step = run["completion_tokens_per_s"] * run["mean_step_s"]
    train = per_second(6 * parameters * trained_tokens_per_step, run["train_s_per_step"]) / 1e9
    generation = per_second(2 * parameters * generated_tokens_per_step, run["generation_s_per_step"]) / 1e9
    return train, generation


def per_second(amount, seconds):
    return amount / seconds if seconds > 0 else float("nan")


def machine_rates(threads):
    """What the benchmark's share-of-machine columns divide by, measured here with the same LibTorch
    (torch 2.13.0, this Python) at the benchmark's threads per process:
      matmul_gflops: by dtype (float32, and bfloat16 for the -bf16 scenarios), best of 5
        torch.nn.functional.linear calls shaped like the small model's MLP on a training batch
        ([4096, 640] x [1792, 640]^T), the kernel rayless's layers call;
      memory_bandwidth_gbs: best of 3 products of a 1 GiB float32 matrix with a vector, the rate a 1-row
        decode step streams its weights at (`rayless-bench decode` sets one step against it)."""
    import torch
    torch.set_num_threads(threads)
    matmul = {}
    for dtype in ("float32", "bfloat16"):
        a, w = torch.randn(4096, 640, dtype=getattr(torch, dtype)), torch.randn(1792, 640, dtype=getattr(torch, dtype))
        torch.nn.functional.linear(a, w)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            torch.nn.functional.linear(a, w)
            best = min(best, time.perf_counter() - t0)
        matmul[dtype] = 2 * 4096 * 640 * 1792 / best / 1e9
    big, v = torch.randn(16384, 16384), torch.randn(16384)
    torch.mv(big, v)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        torch.mv(big, v)
        best = min(best, time.perf_counter() - t0)
    bandwidth = big.numel() * 4 / best / 1e9
    del big
    log(f"machine: float32 matmul {matmul['float32']:.1f} GFLOP/s, bfloat16 matmul {matmul['bfloat16']:.1f} GFLOP/s, "
        f"memory read {bandwidth:.1f} GB/s ({threads} thread(s))")
    return {"matmul_gflops": matmul, "memory_bandwidth_gbs": bandwidth, "rates_threads": threads}


def compute_dtype(scenario_name):
    """The dtype a scenario's matmuls run in: bfloat16 under the -bf16 scenarios' autocast."""
    return "bfloat16" if scenario_name.endswith("-bf16") else "float32"


def machine_matmul_gflops(results, scenario_name):
    """The machine's matmul GFLOP/s for a scenario when results.json has it (results["machine"]
    ["matmul_gflops"]: one process at the benchmark's threads per process; a number (older runs: float32),
    or a dict by dtype)."""
    value = results.get("machine", {}).get("matmul_gflops")
    if isinstance(value, dict):
        return value.get(compute_dtype(scenario_name))
    return value if compute_dtype(scenario_name) == "float32" else None


def rate_cell(gflops, matmul_gflops, processes):
    # n processes have n times one process's matmul rate to draw on
    share = "—" if not matmul_gflops else f"{gflops / (matmul_gflops * processes):.0%}"
    return f"{gflops:.2f} ({share})"


def ratio_cell(value, tool):
    return "—" if tool == "trl" or value is None else f"{value:.2f}x"


def finished_runs(results):
    """The runs that ran to their last step (a run with an "error" stopped early or never started)."""
    return [r for r in results["runs"] if "error" not in r]


def on_gpu_set(results):
    return results.get("scenario_set", "cpu") != "cpu"


def gpu_memory_cell(run):
    if run.get("peak_gpu_reserved_mb") is None:
        return "—"
    return f"{run['peak_gpu_allocated_mb']:.0f} / {run['peak_gpu_reserved_mb']:.0f}"


def runs_table(results):
    runs = sorted(finished_runs(results), key=lambda r: (scenario_order(r["scenario"]), tool_order(r["tool"])))
    trl_by_scenario = {r["scenario"]: r for r in runs if r["tool"] == "trl"}
    prompt_tokens = results.get("prompt_tokens_mean") or statistics.mean(prompt_token_lengths(prompts_path()))
    gpu_memory = on_gpu_set(results)
    header = ["scenario", "model", "tool", "processes × threads", "median s/step", "generation s/step",
              "train s/step", "generation share", "completion tok/s", "tok/s vs TRL", "step time TRL/rayless",
              "train GFLOP/s (% of matmul)", "generation GFLOP/s (% of matmul)", "peak RSS MB/process"]
    header += ["peak GPU MiB allocated / reserved"] if gpu_memory else []
    header += ["mean completion length", "reward first → last", "load during run"]
    rows = []
    for r in runs:
        trl = trl_by_scenario.get(r["scenario"])
        parameters = results["parameters"][r["size"]]
        train, generation = achieved_gflops(r, parameters, prompt_tokens)
        matmul = machine_matmul_gflops(results, r["scenario"])
        rewards = [x[1] for x in r["reward_by_step"]]
        rows.append([
            r["scenario"], f"{r['size']} ({parameters / 1e6:.1f}M)", r["tool"],
            f"{r['processes']} × {r['threads_per_process']}",
            f"{r['median_step_s']:.3f}", f"{r['generation_s_per_step']:.3f}", f"{r['train_s_per_step']:.3f}",
            f"{r['generation_share']:.0%}", f"{r['completion_tokens_per_s']:.1f}",
            ratio_cell(r["completion_tokens_per_s"] / trl["completion_tokens_per_s"] if trl else None, r["tool"]),
            ratio_cell(trl["median_step_s"] / r["median_step_s"] if trl else None, r["tool"]),
            rate_cell(train, matmul, r["processes"]), rate_cell(generation, matmul, r["processes"]),
            f"{r['peak_rss_mb']:.0f}"]
            + ([gpu_memory_cell(r)] if gpu_memory else [])
            + [f"{r['mean_completion_length']:.1f}",
               f"{rewards[0]:.2f} → {rewards[-1]:.2f}" if rewards else "—",
               f"{r['load_before']:.1f} / {r['load_after']:.1f}"])
    return markdown_table(header, rows)


def gpu_targets_table(results):
    """Per scenario, rayless-1 against TRL on the GPU (issue #48's targets): step time, and peak GPU
    memory by each allocator's own counters (reserved: what the device gave the process's cache;
    allocated: what tensors held). On the CPU dry run the memory cells are dashes."""
    by_key = {(r["scenario"], r["tool"]): r for r in finished_runs(results)}
    rows = []
    for name in sorted({r["scenario"] for r in results["runs"]}, key=scenario_order):
        trl, one = by_key.get((name, "trl")), by_key.get((name, "rayless-1"))
        speedup = trl["median_step_s"] / one["median_step_s"] if trl and one else None
        tokens = (one["completion_tokens_per_s"] / trl["completion_tokens_per_s"]
                  if trl and one and trl["completion_tokens_per_s"] else None)

        def memory_ratio(key):
            if not trl or not one or trl.get(key) in (None, 0) or one.get(key) is None:
                return None
            return one[key] / trl[key]
        reserved, allocated = memory_ratio("peak_gpu_reserved_mb"), memory_ratio("peak_gpu_allocated_mb")
        rows.append([name,
                     "—" if speedup is None else f"{speedup:.2f}x",
                     met(None if speedup is None else speedup >= TARGET_GPU_SPEEDUP),
                     "—" if tokens is None else f"{tokens:.2f}x",
                     "—" if reserved is None else f"{reserved:.2f}",
                     "—" if allocated is None else f"{allocated:.2f}",
                     met(None if reserved is None else reserved <= TARGET_GPU_MEMORY_RATIO)])
    header = ["scenario", "step time TRL / rayless-1", f"≥ {TARGET_GPU_SPEEDUP:g}x?",
              "completion tok/s rayless-1 / TRL", "peak GPU reserved rayless-1 / TRL",
              "peak GPU allocated rayless-1 / TRL", f"reserved ≤ {TARGET_GPU_MEMORY_RATIO:g}?"]
    return markdown_table(header, rows)


def unfinished_markdown(results):
    rows = [[r["scenario"], r["tool"], f"{r.get('steps_done', 0)} of {r['steps']}",
             r["error"].splitlines()[0].replace("|", "/")]
            for r in results["runs"] if "error" in r]
    return markdown_table(["scenario", "tool", "steps logged", "why"], rows) if rows else ""


def machine_floor_s(run, parameters, prompt_tokens, machine):
    """A lower bound on one optimizer step of this scenario on this machine, whatever the code: the
    useful work of achieved_gflops at the machine's measured rates (one process; its matmul rate in
    the scenario's dtype, its memory read rate), with nothing overlapped that could overlap:

      train      6·P (8·P with gradient checkpointing: the recomputed forward) per trained token, at the
                 matmul rate;
      generation per generation, over the μ optimizer steps that share it: at least as many decode
                 steps as the mean completion length, each streaming the weights once (P × 4 bytes in
                 float32, × 2 in bfloat16) or computing 2·P per generated token, whichever takes longer;
      optimizer  AdamW reads parameter, gradient and both moments and writes three of them: 28 bytes
                 per parameter (float32 state) at the memory read rate.

    Left out, so the bound stays below what any implementation needs: the prompt prefill, the
    old-policy log-prob pass at μ > 1, attention and element-wise work, casts, the loss."""
    dtype = compute_dtype(run["scenario"])
    matmul = machine["matmul_gflops"][dtype] if isinstance(machine["matmul_gflops"], dict) else machine["matmul_gflops"]
    bandwidth = machine["memory_bandwidth_gbs"] * 1e9
    knobs = run["knobs"]
    batch = knobs["global_batch_size"]
    mu = knobs.get("num_iterations", run.get("mu", 1))
    flops_per_token = (8 if knobs.get("gradient_checkpointing") else 6) * parameters
    train = flops_per_token * batch * (prompt_tokens + run["mean_completion_length"]) / (matmul * 1e9)
    weight_bytes = parameters * (2 if dtype == "bfloat16" else 4)
    decode_streaming = run["mean_completion_length"] * weight_bytes / bandwidth
    decode_compute = 2 * parameters * batch * run["mean_completion_length"] / (matmul * 1e9)
    generation = max(decode_streaming, decode_compute) / mu
    optimizer = 28 * parameters / bandwidth
    return train + generation + optimizer


def met(ok):
    return "—" if ok is None else ("yes" if ok else "NO")


def targets_table(results):
    """Per scenario: rayless-1 against TRL (speed, memory) and rayless-1 against rayless-2 (scaling),
    and the machine's floor for a step (machine_floor_s) against a third of TRL's step: where the floor
    is above it, no code reaches 3x on this machine."""
    by_key = {(r["scenario"], r["tool"]): r for r in finished_runs(results)}
    prompt_tokens = results.get("prompt_tokens_mean") or statistics.mean(prompt_token_lengths(prompts_path()))
    rows = []
    for name in sorted({r["scenario"] for r in results["runs"]}, key=scenario_order):
        trl, one, two = (by_key.get((name, tool)) for tool in ("trl", "rayless-1", "rayless-2"))
        speedup = trl["median_step_s"] / one["median_step_s"] if trl and one else None
        rss = one["peak_rss_mb"] / trl["peak_rss_mb"] if trl and one and trl["peak_rss_mb"] else None
        scaling = one["median_step_s"] / two["median_step_s"] if one and two else None
        # the ranks sample from their own streams, so 2 ranks generate other completions, of another
        # length, than 1: completion tokens per second sets the step against the work it did
        token_scaling = (two["completion_tokens_per_s"] / one["completion_tokens_per_s"]
                         if one and two and one["completion_tokens_per_s"] else None)
        floor = (machine_floor_s(one, results["parameters"][one["size"]], prompt_tokens, results["machine"])
                 if one and "machine" in results and "memory_bandwidth_gbs" in results["machine"] else None)
        reachable = None if floor is None or not trl else floor <= trl["median_step_s"] / TARGET_SPEEDUP
        rows.append([name,
                     "—" if speedup is None else f"{speedup:.2f}x",
                     met(None if speedup is None else speedup >= TARGET_SPEEDUP),
                     "—" if floor is None or not trl else f"{floor:.3f} / {trl['median_step_s'] / TARGET_SPEEDUP:.3f}",
                     met(reachable),
                     "—" if rss is None else f"{rss:.2f}",
                     met(None if rss is None else rss <= TARGET_RSS_RATIO),
                     "—" if scaling is None else f"{scaling:.2f}x",
                     met(None if scaling is None else scaling >= TARGET_SCALING),
                     "—" if token_scaling is None else
                     f"{token_scaling:.2f}x ({one['mean_completion_length']:.0f} / {two['mean_completion_length']:.0f})"])
    header = ["scenario", "step time TRL / rayless-1", f"≥ {TARGET_SPEEDUP:.1f}x?",
              f"machine floor / TRL's step ÷ {TARGET_SPEEDUP:g} (s)", f"{TARGET_SPEEDUP:g}x possible here?",
              "peak RSS rayless-1 / TRL",
              f"≤ {TARGET_RSS_RATIO:.2f}?", "step time 1 rank / 2 ranks", f"≥ {TARGET_SCALING:.1f}x?",
              "completion tok/s 2 ranks / 1 rank (mean completion length 1 / 2)"]
    return markdown_table(header, rows)


def cmd_report(args):
    if args.runs:
        return report_repeated(args.runs.split(","))
    results = load_results(args.out)
    parts = []
    if "equal_settings" in results:
        parts.append("Equal settings (each column read back from what that tool is given):\n\n"
                     + settings_markdown(results["equal_settings"]))
    else:
        parts.append("(no equal-settings table: results.json predates it)\n")
    parts.append("Runs (GFLOP/s: useful work, see achieved_gflops in tools/bench/compare.py):\n\n"
                 + runs_table(results))
    if on_gpu_set(results):
        parts.append(f"Targets on the GPU: rayless-1 step time ≤ 1/{TARGET_GPU_SPEEDUP:g} of TRL's (no vLLM), "
                     f"peak GPU memory ≤ {TARGET_GPU_MEMORY_RATIO:g} × TRL's:\n\n" + gpu_targets_table(results))
    else:
        parts.append(f"Targets: rayless-1 step time ≤ 1/{TARGET_SPEEDUP:g} of TRL's, peak RSS ≤ {TARGET_RSS_RATIO:g} × "
                     f"TRL's; 2 ranks ≥ {TARGET_SCALING:g}x faster than 1 (same scenario, same global batch):\n\n"
                     + targets_table(results))
    unfinished = unfinished_markdown(results)
    if unfinished:
        parts.append("Runs that did not finish (left out above):\n\n" + unfinished)
    text = "\n".join(parts)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    print(text)
    print("commit:", results.get("commit", "not recorded"))
    print("versions:", json.dumps(results["versions"]))
    print("machine:", json.dumps(results["machine"]))
    print(f"load average at start {results['load_at_start']:.1f}, at end {results.get('load_at_end', float('nan')):.1f}; "
          f"total wall {results.get('total_wall_s', float('nan')) / 60:.1f} min")
    plot(results, args.plot)


def report_repeated(dirs):
    """Median and min-max, over repeated full runs, of each (scenario, tool)'s median step time."""
    medians = {}
    for d in dirs:
        for r in finished_runs(load_results(d)):
            medians.setdefault((r["scenario"], r["tool"]), []).append(r["median_step_s"])
    rows = []
    in_order = sorted(medians.items(), key=lambda kv: (scenario_order(kv[0][0]), tool_order(kv[0][1])))
    for (name, tool), values in in_order:
        middle = statistics.median(values)
        rows.append([name, tool, len(values), f"{middle:.3f}", f"{min(values):.3f} – {max(values):.3f}",
                     f"{(max(values) - min(values)) / middle:.0%}"])
    print(f"Median step time over {len(dirs)} runs ({', '.join(dirs)}):\n")
    header = ["scenario", "tool", "runs", "median of median s/step", "min – max", "spread / median"]
    print(markdown_table(header, rows))


STYLES = {"trl": ("tab:orange", "o", "TRL GRPOTrainer"), "rayless-1": ("tab:blue", "s", "rayless, 1 rank"),
          "rayless-2": ("tab:green", "^", "rayless, 2 ranks"),
          "rayless-1-padded": ("tab:purple", "", "rayless, 1 rank, padded log-probs")}


def plot(results, path):
    try:
        import matplotlib
    except ImportError:
        print(f"plot: skipped, no matplotlib in {sys.executable} ({path} not written)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = finished_runs(results)
    names = sorted({r["scenario"] for r in runs}, key=scenario_order)
    cols = min(4, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, names):
        for r in sorted((r for r in runs if r["scenario"] == name), key=lambda r: tool_order(r["tool"])):
            color, marker, label = STYLES.get(r["tool"], ("gray", "x", r["tool"]))
            xs = [x[0] for x in r["reward_by_step"]]
            ys = [x[1] for x in r["reward_by_step"]]
            padded = r["tool"].endswith("-padded")  # drawn on top: it would hide under rayless-1 otherwise
            ax.plot(xs, ys, color=color, marker=marker or None, markersize=4, label=label,
                    linestyle=":" if padded else "-", linewidth=2.5 if padded else 1.5, zorder=3 if padded else 2)
        k = next(r["knobs"] for r in runs if r["scenario"] == name)
        ax.set_title(f"{name}: {k['size']}, G={k['num_generations']}, batch {k['global_batch_size']}, "
                     f"target {k['length_target']}", fontsize=9)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("mean reward")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    common = results.get("common", COMMON)
    fig.suptitle(f"GRPO length reward -|target - tokens|, lr {common.get('learning_rate')}, "
                 f"same initial weights for every tool", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the benchmark (or, with --dry-run, show what it would run)")
    run.add_argument("--out", default=os.path.join(ROOT, "runs", "bench"))
    run.add_argument("--rayless", default=os.path.join(ROOT, "build", "rayless"))
    run.add_argument("--mpirun", default="mpirun")
    run.add_argument("--threads", type=int, default=1, help="torch threads per process, the same for every tool")
    run.add_argument("--scenario-set", choices=list(SCENARIO_SETS), default="cpu",
                     help="cpu (default): the CPU scenarios; gpu: one CUDA GPU, the 0.5B shape "
                          "(tools/gpu/compare_trl.sh); gpu-dry-run: the GPU set's knobs on the CPU, tiny model")
    run.add_argument("--scenarios", help="comma list of scenario names (default: all of the set): "
                                         + ", ".join(s.name for s in ALL_SCENARIOS))
    run.add_argument("--sizes", help="keep only scenarios of these model sizes (comma list: tiny,small)")
    run.add_argument("--mus", help="keep only scenarios with these μ (comma list: 1,4)")
    run.add_argument("--lengths", help="keep only scenarios with these max_completion_length (comma list: 256,1024)")
    run.add_argument("--tools", help="comma list (default: " + "; ".join(
        f"{name}: {','.join(tools)}" for name, tools in DEFAULT_TOOLS.items()) + ")")
    run.add_argument("--keep-going", action="store_true",
                     help="a run that fails or outruns --deadline-s is recorded with its error and the others still "
                          "run (exit 1 at the end)")
    run.add_argument("--deadline-s", type=float,
                     help="seconds from the start by which every run must have ended: a run still going then is "
                          "stopped, later ones are skipped (with --keep-going: recorded, not fatal)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the equal-settings table and the runs, then stop (needs no rayless binary)")
    report = sub.add_parser("report", help="tables and plot from results.json")
    report.add_argument("--out", default=os.path.join(ROOT, "runs", "bench"), help="directory of results.json")
    report.add_argument("--plot", default=os.path.join(ROOT, "docs", "img", "bench_trl_reward.png"),
                        help="the reward plot's PNG (skipped, with a line saying so, where matplotlib is missing)")
    report.add_argument("--runs", help="comma list of results.json directories from repeated full runs: prints the "
                                       "median and spread of each scenario and tool's median step time, nothing else")
    args = p.parse_args()
    cmd_run(args) if args.command == "run" else cmd_report(args)


if __name__ == "__main__":
    main()
