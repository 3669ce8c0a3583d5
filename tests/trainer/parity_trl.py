#!/usr/bin/env python3
"""Whole-step parity with TRL: replays one case of tests/data/trl-steps/ through `rayless train` and
compares the weights after every optimizer step and every metric TRL logged.

A case directory (written by tools/make_trl_step_reference.py, format in tests/data/trl-steps/README.md)
holds TRL's prompts and completions per generation and process (rollouts.jsonl), the metrics TRL
logged (metrics.jsonl) and the weights after each optimizer step (weights.h5). rayless replays the
completions (train.replay_rollouts); rewards, advantages, log-probs, masks, loss and updates are its
own. Needs only numpy and h5py (Debian's python3-h5py), never TRL.

Two layouts of the log-prob passes:
  --layout padded  (train.padding_free = false): TRL's own [B, P + T] layout, so every sum runs in
                   TRL's order. Weights within 1e-9 relative (to the tensor's largest magnitude),
                   metrics within 1e-9 relative (those both sides hold in float32: within 2
                   float32 ulps, see FLOAT32_ULPS): the strict check.
  --layout packed  (train.padding_free = true, the default): each prompt runs once for its
                   generations, so a shared prompt's gradient is summed in another order. The model's
                   RMSNorm runs in float32, as transformers' does, which rounds that float64-level
                   difference to float32 precision (~1e-8 of the gradient), and Adam's early steps
                   amplify it on small gradient components (docs/grpo.md, "Differences from TRL").
                   Weights and metrics within 1e-4 relative, metrics near zero within 1e-6 absolute.

  parity_trl.py --rayless build/rayless --case tests/data/trl-steps/loss_dapo [--layout packed] [--work DIR] [--keep]
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

TOLERANCES = {  # layout: (weights relative, metrics relative, metrics absolute floor)
    "padded": (1e-9, 1e-9, 1e-15),
    "packed": (1e-4, 1e-4, 1e-6),
}
# Logged by transformers/TRL but not a property of the math: wall-clock time and the epoch counter.
NOT_COMPARED = {"step_time", "epoch", "total_flos", "train_runtime", "train_samples_per_second",
                "train_steps_per_second", "train_loss"}

SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32}


def read_safetensors(path):
    with open(path, "rb") as f:
        header_size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_size))
        data = f.read()
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = SAFETENSORS_DTYPES[entry["dtype"]]
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"]).astype(np.float64)
    return tensors


# Metrics TRL computes in float32 (its reward table, the reward mean and std) come out of LibTorch's
# float32 reductions, whose last bit depends on the CPU kernels of the machine that ran them (the
# fixture's reward_std 1.7525492906570435 is 1.752549171447754 with torch 2.13.0+cpu on a Xeon with
# AVX-512, in Python as in rayless). A metric that TRL and rayless both hold in float32 may differ
# by this many float32 units in the last place; everything else keeps the layout's tolerance.
FLOAT32_ULPS = 2


def is_float32(value):
    return isinstance(value, float) and math.isfinite(value) and float(struct.unpack("<f", struct.pack("<f", value))[0]) == value


def float32_ulps(a, b):
    def ordered(x):
        (bits,) = struct.unpack("<i", struct.pack("<f", x))
        return bits if bits >= 0 else -(bits & 0x7FFFFFFF)
    return abs(ordered(a) - ordered(b))


def relative_error(got, want):
    scale = max(float(np.max(np.abs(want))), 1e-300)
    return float(np.max(np.abs(got - want))) / scale


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_rayless(args, case_dir, case, work):
    base = os.path.join(os.path.dirname(os.path.abspath(case_dir)))
    # a case may name its own model (relative to the repository: the tool-calling cases')
    model_dir = args.model or (os.path.join(REPO, case["model"]) if "model" in case else os.path.join(base, "model"))
    prompts = os.path.join(case_dir, "prompts.jsonl")
    if not os.path.exists(prompts):
        prompts = os.path.join(base, "prompts.jsonl")
    settings = [
        f'model.path="{model_dir}"', 'model.dtype="float64"', 'model.device="cpu"', 'tokenizer.path=""',
        f'data.path="{prompts}"', 'data.shuffle=false',
        f'train.replay_rollouts="{os.path.join(case_dir, "rollouts.jsonl")}"',
        "train.bf16=false", "train.gradient_checkpointing=false",
        f"train.padding_free={'true' if args.layout == 'packed' else 'false'}",
        "checkpoint.save_steps=1", "checkpoint.keep_last=1000", "log.console=false",
        "distributed.threads_per_rank=1", "distributed.collective_timeout_s=120",
    ]
    if case.get("tokenizer_file"):  # the case's own tokenizer.json, relative to the fixture root
        settings.insert(settings.index('tokenizer.path=""') + 1,
                        f'tokenizer.path="{os.path.join(base, case["tokenizer_file"])}"')
    # the case's own settings, less the paths this script resolves itself
    own = ("model.path=", "data.path=", "train.replay_rollouts=", "train.output_dir=")
    settings += [s for s in case["rayless_overrides"] if not s.startswith(own)] + list(args.set or [])
    command = [args.rayless, "train", "--output", work]
    for s in settings:
        command += ["--set", s]
    processes = int(case.get("num_processes", 1))
    if processes > 1:
        command = ["mpirun", "-np", str(processes), "--oversubscribe"] + command
    print("+ " + " ".join(command), flush=True)
    # from the repository root: tool and environment workers are commands relative to it
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    if result.returncode != 0:
        print(result.stdout)
        raise SystemExit(f"rayless train exited {result.returncode}")


def compare_tool_masks(case_dir, work):
    """Tool-calling cases: the completions rayless assembled (its tool loop over the replayed model turns) and
    its tool masks, as stored, against TRL's final completion_ids and tool_mask."""
    failures = []
    for line in open(os.path.join(case_dir, "rollouts.jsonl")):
        trl = json.loads(line)
        if "trl_tool_mask" not in trl:
            continue
        path = os.path.join(work, "rollouts", f"rank-{trl['rank']:05d}", f"step-{trl['step']:08d}.h5")
        with h5py.File(path, "r") as f:
            g = f[f"step_{trl['step']:08d}"]
            offsets = g["completion_offsets"][()]
            ids, mask = g["completion_ids"][()], g["tool_mask"][()]
            for i, (want_ids, want_mask) in enumerate(zip(trl["completion_ids"], trl["trl_tool_mask"], strict=True)):
                got_ids = ids[offsets[i]:offsets[i + 1]].tolist()
                got_mask = mask[offsets[i]:offsets[i + 1]].tolist()
                if got_ids != want_ids or got_mask != want_mask:
                    failures.append(f"step {trl['step']} rank {trl['rank']} row {i}: stored completion or tool_mask "
                                    f"differs from TRL's ({sum(got_mask)} vs {sum(want_mask)} model tokens)")
            if len(g["conversations"]) != len(trl["completion_ids"]):
                failures.append(f"step {trl['step']}: {len(g['conversations'])} stored conversations")
    return failures


def compare(case_dir, work, layout):
    weight_tolerance, metric_tolerance, metric_floor = TOLERANCES[layout]
    failures = []
    worst_weight = (0.0, "")
    with h5py.File(os.path.join(case_dir, "weights.h5"), "r") as h5:
        steps = sorted(int(k.split("_")[1]) for k in h5.keys() if k.startswith("step_"))
        for step in steps:
            path = os.path.join(work, "checkpoints", f"step-{step:08d}", "model.safetensors")
            if not os.path.exists(path):
                failures.append(f"no rayless checkpoint after step {step} ({path})")
                continue
            got = read_safetensors(path)
            for name, dataset in h5[f"step_{step}"].items():
                want = dataset[()]
                if name not in got:
                    failures.append(f"step {step}: rayless has no tensor {name}")
                    continue
                error = relative_error(got[name], want)
                if error > worst_weight[0]:
                    worst_weight = (error, f"step {step} {name}")
                if not error <= weight_tolerance:
                    failures.append(f"step {step}: {name} differs by {error:.3e} relative")

    failures += compare_tool_masks(case_dir, work)

    trl = [json.loads(line) for line in open(os.path.join(case_dir, "metrics.jsonl")) if line.strip()]
    ours = {m["step"]: m for m in (json.loads(line) for line in open(os.path.join(work, "metrics.jsonl")) if line.strip())}
    worst_metric = (0.0, "")
    missing = set()
    for entry in trl:
        step = entry["step"]
        if step not in ours:
            failures.append(f"rayless logged no step {step}")
            continue
        for key, want in entry.items():
            if key == "step" or key in NOT_COMPARED or want is None:
                continue
            if key not in ours[step]:
                missing.add(key)
                continue
            got = ours[step][key]
            if got is None or (isinstance(got, float) and math.isnan(got)):
                failures.append(f"step {step}: {key} = {got}, TRL {want}")
                continue
            error = abs(got - want) / max(abs(want), 1e-300)
            if abs(got - want) <= metric_floor:
                error = 0.0
            if is_float32(want) and is_float32(got) and float32_ulps(got, want) <= FLOAT32_ULPS:
                error = 0.0
            if error > worst_metric[0]:
                worst_metric = (error, f"step {step} {key}")
            if not error <= metric_tolerance:
                failures.append(f"step {step}: {key} = {got!r}, TRL {want!r} ({error:.3e} relative)")
    for key in sorted(missing):
        failures.append(f"TRL logs {key}, rayless does not")
    return failures, worst_weight, worst_metric


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rayless", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--work", help="run directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument("--model", help="model directory (default: the cases' shared model/)")
    parser.add_argument("--layout", choices=sorted(TOLERANCES), default="padded",
                        help="log-prob pass layout (train.padding_free): padded = TRL's, strict; packed = rayless's default")
    parser.add_argument("--set", action="append", help="extra rayless --set (e.g. train.padding_free=false)")
    args = parser.parse_args()
    case_dir = os.path.abspath(args.case)
    case = json.load(open(os.path.join(case_dir, "case.json")))
    work = args.work or tempfile.mkdtemp(prefix=f"parity-{os.path.basename(case_dir)}-")
    if os.path.exists(work):
        shutil.rmtree(work)
    try:
        run_rayless(args, case_dir, case, work)
        failures, (weight_error, weight_where), (metric_error, metric_where) = compare(case_dir, work, args.layout)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)
    name = case.get("name", os.path.basename(case_dir))
    print(f"parity {name} ({args.layout}): largest weight error {weight_error:.2e} ({weight_where or '-'}), "
          f"largest metric error {metric_error:.2e} ({metric_where or '-'})")
    for f in failures:
        print(f"  FAIL {f}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
