#!/usr/bin/env python3
"""Recompute the expected values of the kind="loss" reference cases with the installed TRL.

For every kind="loss" case (tests/data/trl-reference/loss_*.h5, layout in that folder's README.md) this
runs the installed TRL's own `GRPOTrainer._compute_loss` (and, through it, `get_high_entropy_mask`) on
the stored inputs in float64 and compares the result with the stored expected values:

  expected/loss                  the returned loss
  expected/grad_per_token_logps  autograd d loss / d per_token_logps
  expected/entropy_mask          the mask get_high_entropy_mask returned (when top_entropy_quantile < 1)
  expected/metrics/NAME          what _compute_loss appended to trainer._metrics["train"] ('/' -> '.')

No model is involved: the trainer is an `object.__new__(GRPOTrainer)` carrying the attributes
`GRPOTrainer.__init__` would set from a real `GRPOConfig` built with the case's settings, a real
single-process CPU `Accelerator`, and `_get_per_token_logps_and_entropies` replaced by a function that
returns the stored per_token_logps (a float64 leaf that requires grad) and entropies.

Settings the cases do not carry:
  * steps_per_generation = gradient_accumulation_steps (TRL's default), so the dapo/cispo factor
    gradient_accumulation_steps / steps_per_generation is 1;
  * use_bias_correction_kl = False unless --use-bias-correction-kl: TRL 1.16's GRPOConfig defaults it
    to True (the KL term multiplied by the importance ratio), but the cases and rayless use the plain k3
    KL, as the project's step fixtures do (tools/make_trl_step_reference.py pins it to False);
  * no vLLM, no off-policy mask, no entropy bonus, no aux loss, train mode.

It prints, per case, the largest relative difference of each quantity (|new - old| / largest magnitude
of the two; for the entropy mask the fraction of differing entries). With --write it rewrites only the
cases that differ by more than --tol (1e-9): the inputs and all root attributes are kept as they are,
`expected` is replaced, and the root attribute recomputed_with = "trl <version>" is added.

    .venv-trl/bin/python tools/trl_steps/recompute_loss_reference.py tests/data/trl-reference
    .venv-trl/bin/python tools/trl_steps/recompute_loss_reference.py tests/data/trl-reference --write

Exit status: 0 when no case differs beyond --tol (or after --write), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import types
import warnings
from collections import defaultdict
from pathlib import Path

import h5py
import numpy as np
import torch

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
torch.set_num_threads(1)

import trl  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402


def attr(h: h5py.File, name: str):
    value = h.attrs[name]
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, np.generic):
        value = value.item()
    return value


def make_trainer(h: h5py.File, use_bias_correction_kl: bool, workdir: str) -> GRPOTrainer:
    delta = attr(h, "delta")
    delta = None if isinstance(delta, str) and delta.lower() == "none" else float(delta)
    num_processes = int(attr(h, "num_processes"))
    if num_processes != 1:
        raise SystemExit(f"{h.filename}: num_processes = {num_processes}; only single-process cases are supported")
    ga = int(attr(h, "gradient_accumulation_steps"))
    args = GRPOConfig(
        output_dir=workdir,
        report_to="none",
        use_cpu=True,
        loss_type=attr(h, "loss_type"),
        importance_sampling_level=attr(h, "importance_sampling_level"),
        beta=float(attr(h, "beta")),
        epsilon=float(attr(h, "epsilon_low")),
        epsilon_high=float(attr(h, "epsilon_high")),
        delta=delta,
        top_entropy_quantile=float(attr(h, "top_entropy_quantile")),
        max_completion_length=int(attr(h, "max_completion_length")),
        gradient_accumulation_steps=ga,
        steps_per_generation=ga,
        sapo_temperature_pos=float(attr(h, "sapo_temperature_pos")),
        sapo_temperature_neg=float(attr(h, "sapo_temperature_neg")),
        use_bias_correction_kl=use_bias_correction_kl,
        use_vllm=False,
        off_policy_mask_threshold=None,
        entropy_coef=0.0,
        use_adaptive_entropy=False,
    )
    # What GRPOTrainer.__init__ sets from args, for the attributes _compute_loss reads
    t = object.__new__(GRPOTrainer)
    t.args = args
    # built after GRPOConfig, whose device setup resets accelerate's shared state
    t.accelerator = Accelerator(cpu=True)
    assert t.accelerator.num_processes == 1
    t.model = types.SimpleNamespace(training=True)
    t.loss_type = args.loss_type
    t.importance_sampling_level = args.importance_sampling_level
    t.beta = args.beta
    t.epsilon_low = args.epsilon
    t.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    t.top_entropy_quantile = args.top_entropy_quantile
    t.max_completion_length = args.max_completion_length
    t.off_policy_mask_threshold = args.off_policy_mask_threshold
    t.use_vllm = args.use_vllm
    t.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    t.entropy_coef = args.entropy_coef
    t.use_adaptive_entropy = args.use_adaptive_entropy
    t._entropy_bonus_enabled = t.entropy_coef != 0.0 or t.use_adaptive_entropy
    t.aux_loss_enabled = False
    t.current_gradient_accumulation_steps = ga  # Trainer sets it to the number of micro-batches in the window
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return t


def run_trl(path: Path, use_bias_correction_kl: bool, workdir: str) -> dict:
    with h5py.File(path, "r") as h:
        trainer = make_trainer(h, use_bias_correction_kl, workdir)
        inp = {k: torch.from_numpy(h["inputs"][k][()]) for k in h["inputs"]}
        num_items = float(attr(h, "num_items_in_batch"))
    assert num_items == int(num_items), f"{path}: num_items_in_batch {num_items} is not a whole number"

    per_token_logps = inp["per_token_logps"].to(torch.float64).clone().requires_grad_(True)
    entropies = inp["entropies"].to(torch.float64)
    completion_mask = inp["completion_mask"].to(torch.long)  # TRL's completion mask is an integer tensor
    B, T = per_token_logps.shape

    def stored_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == T and kwargs.get("compute_entropy", False)
        return per_token_logps, entropies, None

    trainer._get_per_token_logps_and_entropies = stored_logps_and_entropies

    entropy_masks = []
    class_get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask

    def recording_get_high_entropy_mask(entropies_, mask_, threshold_):
        out = class_get_high_entropy_mask(trainer, entropies_, mask_, threshold_)
        entropy_masks.append(out)
        return out

    trainer.get_high_entropy_mask = recording_get_high_entropy_mask

    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": completion_mask,
        "advantages": inp["advantages"].to(torch.float64),
        "old_per_token_logps": inp["old_per_token_logps"].to(torch.float64),
        "ref_per_token_logps": inp["ref_per_token_logps"].to(torch.float64),
        # TRL: accelerator.gather(loss_mask.sum()).sum(), an integer tensor
        "num_items_in_batch": torch.tensor(int(num_items), dtype=torch.long),
    }
    loss = trainer._compute_loss(None, inputs)
    loss.backward()

    out = {
        "loss": np.asarray(loss.detach().numpy(), dtype=np.float64),
        "grad_per_token_logps": per_token_logps.grad.detach().numpy().astype(np.float64),
        "metrics": {},
    }
    if trainer.top_entropy_quantile < 1.0:
        assert len(entropy_masks) == 1
        out["entropy_mask"] = entropy_masks[0].numpy().astype(np.int8)
    else:
        assert not entropy_masks
    for name, values in trainer._metrics["train"].items():
        assert len(values) == 1, (name, values)
        out["metrics"][name.replace("/", ".")] = float(values[0])
    return out


def rel_diff(new, old) -> float:
    new = np.asarray(new, dtype=np.float64)
    old = np.asarray(old, dtype=np.float64)
    if new.shape != old.shape:
        return math.inf
    both_nan = np.isnan(new) & np.isnan(old)
    if np.any(np.isnan(new) != np.isnan(old)):
        return math.inf
    new = np.where(both_nan, 0.0, new)
    old = np.where(both_nan, 0.0, old)
    scale = max(np.max(np.abs(new), initial=0.0), np.max(np.abs(old), initial=0.0))
    diff = np.max(np.abs(new - old), initial=0.0)
    return 0.0 if diff == 0.0 else diff / scale


def compare(new: dict, h: h5py.File) -> dict[str, float]:
    exp = h["expected"]
    d = {
        "loss": rel_diff(new["loss"], exp["loss"][()]),
        "grad_per_token_logps": rel_diff(new["grad_per_token_logps"], exp["grad_per_token_logps"][()]),
    }
    if "entropy_mask" in new or "entropy_mask" in exp:
        if "entropy_mask" in new and "entropy_mask" in exp:
            a, b = new["entropy_mask"], exp["entropy_mask"][()]
            d["entropy_mask"] = math.inf if a.shape != b.shape else float(np.mean(a != b))
        else:
            d["entropy_mask"] = math.inf
    stored = set(exp["metrics"].keys()) if "metrics" in exp else set()
    for name in sorted(stored | set(new["metrics"])):
        if name in stored and name in new["metrics"]:
            d["metrics." + name] = rel_diff(new["metrics"][name], exp["metrics"][name][()])
        else:
            d["metrics." + name] = math.inf  # present on one side only
    return d


def rewrite(path: Path, new: dict, version: str) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".h5", dir=path.parent)
    os.close(fd)
    try:
        with h5py.File(path, "r") as src, h5py.File(tmp, "w") as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            dst.attrs["recomputed_with"] = version
            for name in src:
                if name != "expected":
                    src.copy(src[name], dst, name=name)
            exp = dst.create_group("expected")
            exp.create_dataset("loss", data=np.float64(new["loss"]))
            exp.create_dataset("grad_per_token_logps", data=new["grad_per_token_logps"].astype(np.float64))
            if "entropy_mask" in new:
                exp.create_dataset("entropy_mask", data=new["entropy_mask"].astype(np.int8))
            metrics = exp.create_group("metrics")
            for name, value in sorted(new["metrics"].items()):
                metrics.create_dataset(name, data=np.float64(value))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="directory of reference cases (*.h5)")
    ap.add_argument("--write", action="store_true", help="rewrite the cases that differ beyond --tol")
    ap.add_argument("--tol", type=float, default=1e-9, help="relative difference counted as a change (1e-9)")
    ap.add_argument("--use-bias-correction-kl", action="store_true",
                    help="TRL 1.16's GRPOConfig default (KL times the importance ratio); off by default")
    ap.add_argument("--only", nargs="*", default=None, help="restrict to these file names")
    a = ap.parse_args()

    version = f"trl {trl.__version__}"
    print(f"{version}, torch {torch.__version__}; use_bias_correction_kl={a.use_bias_correction_kl}")
    files = sorted(a.root.glob("*.h5"))
    if a.only:
        files = [f for f in files if f.name in set(a.only)]
    differing = []
    with tempfile.TemporaryDirectory() as workdir:
        for path in files:
            with h5py.File(path, "r") as h:
                if attr(h, "kind") != "loss":
                    continue
            new = run_trl(path, a.use_bias_correction_kl, workdir)
            with h5py.File(path, "r") as h:
                d = compare(new, h)
            worst_key = max(d, key=d.get)
            worst = d[worst_key]
            changed = worst > a.tol
            detail = ", ".join(f"{k} {v:.3g}" for k, v in d.items() if v > a.tol)
            print(f"{'DIFF' if changed else 'same'} {path.name}: largest relative difference {worst:.3g} "
                  f"({worst_key})" + (f"; over {a.tol:g}: {detail}" if changed else ""))
            if changed:
                differing.append((path, new))
    print(f"{len(differing)} case(s) differ beyond {a.tol:g}: {' '.join(p.name for p, _ in differing) or '-'}")
    if a.write:
        for path, new in differing:
            rewrite(path, new, version)
            print(f"rewrote {path}")
        return 0
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
