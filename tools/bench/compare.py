#!/usr/bin/env python3
"""Side-by-side GRPO benchmark: TRL's GRPOTrainer vs rayless (1 and 2 ranks) on one shared setup.

  compare.py run    prepares the shared setup (models written by `rayless-bench init-model`, so both tools
                    load identical weights and the same tokenizer.json), runs every (size, mu, tool)
                    and writes OUT/results.json
  compare.py report reads OUT/results.json and writes OUT/table.md and the reward plot (PNG)

Both are called by tools/bench/compare.sh, the one command that reproduces docs/benchmarks.md.
Needs .venv-trl's Python (trl, transformers, matplotlib).
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tools", "bench")

# One GRPO configuration for every tool. The global batch (completions per optimizer step) is the same
# everywhere: rayless at 2 ranks gets half of it per rank, as TRL would split it over 2 processes.
SETTINGS = {
    "num_generations": 4,
    "max_completion_length": 32,
    "global_batch_size": 16,  # per_device_train_batch_size x processes; gradient_accumulation_steps = 1
    "learning_rate": 1e-3,
    "loss_type": "dapo",
    "beta": 0.0,
    "temperature": 1.0,
    "seed": 42,
    "length_target": 16,
    "prompts": "data/demo/prompts.jsonl",
}
# (steps, warm-up steps left out of the timing). At mu = 4 a generation serves 4 optimizer steps, so
# the warm-up is one whole generation cycle and the measured window holds whole cycles.
STEPS = {("tiny", 1): (24, 2), ("tiny", 4): (28, 4), ("small", 1): (8, 2), ("small", 4): (12, 4)}
# rayless-1-padded: one rank with train.padding_free = false, TRL's padded [B, P + T] log-prob layout,
# to show how much of the difference the packed log-prob pass makes.
TOOLS = ["trl", "rayless-1-padded", "rayless-1", "rayless-2"]


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


def run_logged(cmd, log_path, env=None):
    """Runs cmd with output to log_path; returns (wall seconds, load before, load after)."""
    load_before = load_average()
    t0 = time.perf_counter()
    with open(log_path, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        with open(log_path) as f:
            tail = "".join(f.readlines()[-25:])
        sys.exit(f"bench: command failed ({proc.returncode}): {' '.join(cmd)}\n--- {log_path} (tail)\n{tail}")
    return wall, load_before, load_average()


def thread_env(threads):
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(threads)
    return env


def prepare_models(rayless, out, sizes):
    models = {}
    for size in sizes:
        target = os.path.join(out, "models", size)
        if os.path.exists(target):
            shutil.rmtree(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # init-model lives in rayless-bench, beside the trainer binary
        bench = os.path.join(os.path.dirname(rayless), "rayless-bench")
        cmd = [bench, "init-model", "--config-json", os.path.join(HERE, "models", f"{size}.json"),
               "--out", target, "--seed", "1234", "--tokenizer", "byte"]
        run_logged(cmd, os.path.join(out, "models", f"{size}.log"))
        models[size] = target
    return models


def rayless_config(model_dir, mu, steps, per_rank_batch, threads, padding_free=True):
    s = SETTINGS
    return f"""# written by tools/bench/compare.py
[model]
path = "{model_dir}"
dtype = "float32"
device = "cpu"

[tokenizer]
path = ""
chat_template = "none"

[data]
path = "{os.path.join(ROOT, s['prompts'])}"
max_prompt_length = 128

[generation]
max_completion_length = {s['max_completion_length']}
temperature = {s['temperature']}
top_p = 1.0
top_k = 0

[reward]
functions = ["length"]
length_target = {s['length_target']}
length_unit = "tokens"

[grpo]
num_generations = {s['num_generations']}
num_iterations = {mu}
loss_type = "{s['loss_type']}"
beta = {s['beta']}

[optim]
learning_rate = {s['learning_rate']}
lr_scheduler_type = "constant"
weight_decay = 0.0
max_grad_norm = 1.0

[train]
max_steps = {steps}
seed = {s['seed']}
per_device_train_batch_size = {per_rank_batch}
gradient_accumulation_steps = 1
padding_free = {"true" if padding_free else "false"}

[checkpoint]
save_steps = 0
keep_last = 1

[distributed]
threads_per_rank = {threads}
"""


def run_one(tool, size, mu, model_dir, args):
    steps, warmup = STEPS[(size, mu)]
    run_dir = os.path.join(args.out, "runs", f"{size}-mu{mu}-{tool}")
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir)
    log_path = run_dir + ".log"
    s = SETTINGS
    if tool == "trl":
        processes = 1
        cmd = [sys.executable, os.path.join(HERE, "run_trl.py"), "--model", model_dir,
               "--prompts", os.path.join(ROOT, s["prompts"]), "--output", run_dir,
               "--threads", str(args.threads), "--num-generations", str(s["num_generations"]),
               "--max-completion-length", str(s["max_completion_length"]),
               "--per-device-train-batch-size", str(s["global_batch_size"]),
               "--learning-rate", str(s["learning_rate"]), "--num-iterations", str(mu),
               "--loss-type", s["loss_type"], "--beta", str(s["beta"]), "--temperature", str(s["temperature"]),
               "--max-steps", str(steps), "--seed", str(s["seed"]), "--length-target", str(s["length_target"])]
    else:
        processes = int(tool.split("-")[1])
        config_path = run_dir + ".toml"
        with open(config_path, "w") as f:
            f.write(rayless_config(model_dir, mu, steps, s["global_batch_size"] // processes, args.threads,
                                   padding_free=not tool.endswith("-padded")))
        cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(processes),
               args.rayless, "train", "--config", config_path, "--output", run_dir]
    log(f"{size} mu={mu} {tool}: {steps} steps (load {load_average():.1f})")
    wall, load_before, load_after = run_logged(cmd, log_path, env=thread_env(args.threads))
    rows = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    if len(rows) != steps:
        sys.exit(f"bench: {run_dir}/metrics.jsonl has {len(rows)} steps, expected {steps}")
    result = summarise(rows, warmup)
    result.update({"tool": tool, "size": size, "mu": mu, "steps": steps, "warmup_steps": warmup,
                   "processes": processes, "threads_per_process": args.threads, "process_wall_s": wall,
                   "load_before": load_before, "load_after": load_after})
    log(f"  median step {result['median_step_s']:.3f}s, {result['completion_tokens_per_s']:.1f} tok/s, "
        f"gen {result['generation_share']:.0%}, peak RSS {result['peak_rss_mb']:.0f} MB, wall {wall:.0f}s")
    return result


def summarise(rows, warmup):
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
        "mean_completion_length": tokens / max(1, generations) / SETTINGS["global_batch_size"],
        "peak_rss_mb": max(r.get("memory/peak_rss_mb", 0.0) for r in rows),
        "reward_by_step": [[r["step"], r["reward"]] for r in rows if r.get("reward") is not None],
        "step_time_by_step": [[r["step"], r["step_time"]] for r in rows],
    }


def versions(rayless):
    import torch
    import transformers
    import trl
    out = {"trl": trl.__version__, "transformers": transformers.__version__, "torch (TRL side)": torch.__version__}
    try:
        text = subprocess.run([rayless, "version"], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            out[name] = value
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


def cmd_run(args):
    args.out = os.path.abspath(args.out)
    args.rayless = os.path.abspath(args.rayless)
    os.makedirs(args.out, exist_ok=True)
    sizes = args.sizes.split(",")
    mus = [int(m) for m in args.mus.split(",")]
    tools = args.tools.split(",")
    started = time.time()
    results = {"settings": SETTINGS, "steps": {f"{k[0]}-mu{k[1]}": v for k, v in STEPS.items()},
               "machine": machine_info(), "versions": versions(args.rayless), "threads_per_process": args.threads,
               "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_at_start": load_average(), "runs": []}
    models = prepare_models(args.rayless, args.out, sizes)
    results["parameters"] = {size: count_parameters(models[size]) for size in sizes}
    results["model_configs"] = {}
    for size in sizes:
        with open(os.path.join(models[size], "config.json")) as f:
            results["model_configs"][size] = json.load(f)
    for size in sizes:
        for mu in mus:
            for tool in tools:
                results["runs"].append(run_one(tool, size, mu, models[size], args))
                with open(os.path.join(args.out, "results.json"), "w") as f:
                    json.dump(results, f, indent=1)
    results["load_at_end"] = load_average()
    results["total_wall_s"] = time.time() - started
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    log(f"done in {results['total_wall_s'] / 60:.1f} min: {args.out}/results.json")


def count_parameters(model_dir):
    """Parameters stored in the model directory's safetensors files (header only: 8-byte size + JSON)."""
    import struct
    total = 0
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, name), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for key, entry in header.items():
            if key != "__metadata__":
                n = 1
                for dim in entry["shape"]:
                    n *= dim
                total += n
    return total


def cmd_report(args):
    with open(os.path.join(args.out, "results.json")) as f:
        results = json.load(f)
    runs = results["runs"]
    by_key = {(r["size"], r["mu"], r["tool"]): r for r in runs}
    lines = ["| model | μ | tool | processes × threads | median s/step | generation s/step | train s/step "
             "| generation share | completion tok/s | tok/s vs TRL | step time TRL/rayless | peak RSS MB/process "
             "| mean completion length | reward first → last | load during run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        trl = by_key.get((r["size"], r["mu"], "trl"))
        rewards = [x[1] for x in r["reward_by_step"]]
        params = results["parameters"][r["size"]] / 1e6
        ratio_tps = r["completion_tokens_per_s"] / trl["completion_tokens_per_s"] if trl else float("nan")
        ratio_step = trl["median_step_s"] / r["median_step_s"] if trl else float("nan")
        lines.append(
            f"| {r['size']} ({params:.1f}M) | {r['mu']} | {r['tool']} | {r['processes']} × {r['threads_per_process']} "
            f"| {r['median_step_s']:.3f} | {r['generation_s_per_step']:.3f} | {r['train_s_per_step']:.3f} "
            f"| {r['generation_share']:.0%} | {r['completion_tokens_per_s']:.1f} "
            f"| {'—' if r['tool'] == 'trl' else f'{ratio_tps:.2f}x'} "
            f"| {'—' if r['tool'] == 'trl' else f'{ratio_step:.2f}x'} "
            f"| {r['peak_rss_mb']:.0f} | {r['mean_completion_length']:.1f} "
            f"| {rewards[0]:.2f} → {rewards[-1]:.2f} | {r['load_before']:.1f} / {r['load_after']:.1f} |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    print(table)
    print("versions:", json.dumps(results["versions"]))
    print("machine:", json.dumps(results["machine"]))
    print(f"load average at start {results['load_at_start']:.1f}, at end {results.get('load_at_end', float('nan')):.1f}; "
          f"total wall {results.get('total_wall_s', float('nan')) / 60:.1f} min")
    plot(results, args.plot)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    sizes = sorted({r["size"] for r in runs}, key=lambda s: ["tiny", "small"].index(s) if s in ("tiny", "small") else 9)
    mus = sorted({r["mu"] for r in runs})
    fig, axes = plt.subplots(len(sizes), len(mus), figsize=(5.2 * len(mus), 3.6 * len(sizes)), squeeze=False)
    styles = {"trl": ("tab:orange", "o", "TRL GRPOTrainer"), "rayless-1": ("tab:blue", "s", "rayless, 1 rank"),
              "rayless-2": ("tab:green", "^", "rayless, 2 ranks"),
              "rayless-1-padded": ("tab:purple", "", "rayless, 1 rank, padded log-probs")}
    for i, size in enumerate(sizes):
        for j, mu in enumerate(mus):
            ax = axes[i][j]
            for r in runs:
                if r["size"] != size or r["mu"] != mu:
                    continue
                color, marker, label = styles.get(r["tool"], ("gray", "x", r["tool"]))
                xs = [x[0] for x in r["reward_by_step"]]
                ys = [x[1] for x in r["reward_by_step"]]
                padded = r["tool"].endswith("-padded")  # drawn on top: it should hide under rayless-1 otherwise
                ax.plot(xs, ys, color=color, marker=marker or None, markersize=4, label=label,
                        linestyle=":" if padded else "-", linewidth=2.5 if padded else 1.5, zorder=3 if padded else 2)
            ax.set_title(f"{size} model, μ = {mu}")
            ax.set_xlabel("optimizer step")
            ax.set_ylabel("mean reward")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    t = SETTINGS
    fig.suptitle(f"GRPO length reward -|{t['length_target']} - tokens|, G={t['num_generations']}, "
                 f"batch {t['global_batch_size']}, lr {t['learning_rate']}, same initial weights", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--out", default=os.path.join(ROOT, "runs", "bench"))
    run.add_argument("--rayless", default=os.path.join(ROOT, "build", "rayless"))
    run.add_argument("--mpirun", default="mpirun")
    run.add_argument("--threads", type=int, default=1, help="torch threads per process, the same for every tool")
    run.add_argument("--sizes", default="tiny,small")
    run.add_argument("--mus", default="1,4")
    run.add_argument("--tools", default=",".join(TOOLS))
    report = sub.add_parser("report")
    report.add_argument("--out", default=os.path.join(ROOT, "runs", "bench"))
    report.add_argument("--plot", default=os.path.join(ROOT, "docs", "img", "bench_trl_reward.png"))
    args = p.parse_args()
    cmd_run(args) if args.command == "run" else cmd_report(args)


if __name__ == "__main__":
    main()
