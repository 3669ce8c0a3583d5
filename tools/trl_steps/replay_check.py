#!/usr/bin/env python3
"""Independent replay of the TRL step fixtures (tests/data/trl-steps), without TRL.

Reads case.json, rollouts.jsonl and the model, recomputes rewards, advantages, log-probs, losses,
gradients (several processes simulated by averaging their gradients, as DDP does), AdamW steps,
the learning-rate schedule and the main metrics with plain PyTorch in float64, and compares them
with the weights and metrics TRL recorded. It documents, as code, the rules a replay must follow
(see tests/data/trl-steps/README.md) and checks that the fixture files carry enough to follow them.

    .venv-trl/bin/python tools/trl_steps/replay_check.py [--root tests/data/trl-steps] [CASE ...]

Exit status 0 when every case matches (weights within --tol = 1e-10, metrics within --metric-tol =
1e-12). With the committed fixtures: weights agree to 2e-13; loss, learning_rate, clip ratios, rewards
and advantages agree bit for bit, entropy / kl / grad_norm to the last bit or two.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

import h5py
import numpy as np
import torch
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]


def length_reward(ids, target):
    return -abs(float(target - len(ids)))


def format_reward(text, pattern):
    return 1.0 if re.search(pattern, text) else 0.0


def unbiased_std(x: torch.Tensor, dim=None) -> torch.Tensor:
    # TRL's nanstd without NaNs: mean of squared deviations times n / (n - 1), then sqrt (same dtype as x)
    if dim is None:
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        n = x.numel()
    else:
        mean = x.mean(dim=dim, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=dim, keepdim=True)
        n = x.shape[dim]
    var = var * (torch.tensor(n) / torch.tensor(n - 1))  # int64 / int64: a float32 tensor
    return var.sqrt() if dim is None else var.sqrt().squeeze(dim)


def advantages_of(rpf: torch.Tensor, weights: torch.Tensor, G: int, scale: str, aggregation: str) -> torch.Tensor:
    """float32, as TRL: rewards_per_func and weights are float32 tensors."""
    if aggregation == "sum_then_normalize":
        rewards = (rpf * weights.unsqueeze(0)).sum(dim=1)
        mean = rewards.view(-1, G).mean(dim=1).repeat_interleave(G)
        if scale == "batch":
            std = unbiased_std(rewards).expand_as(rewards)
        else:
            std = unbiased_std(rewards.view(-1, G), dim=1).repeat_interleave(G)
        adv = rewards - mean
        if scale != "none":
            adv = adv / (std + 1e-4)
        return adv
    grouped = rpf.view(-1, G, rpf.shape[1])
    mean_k = grouped.mean(dim=1, keepdim=True)
    std_k = unbiased_std(grouped, dim=1).unsqueeze(1)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, rpf.shape[1])
    rewards = (reward_k * weights.unsqueeze(0)).sum(dim=1)
    return (rewards - rewards.mean()) / (unbiased_std(rewards) + 1e-4)


def lr_lambda(kind, warmup, total):
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        if kind == "constant":
            return 1.0
        progress = float(step - warmup) / float(max(1, total - warmup))
        if kind == "linear":
            return max(0.0, float(total - step) / float(max(1, total - warmup)))
        if kind == "cosine":
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
        raise ValueError(kind)

    return f


def no_decay(name: str) -> bool:
    # transformers' Trainer.get_decay_parameter_names: no weight decay for biases and norm weights
    return bool(re.search(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)", name))


def logps_and_entropies(model, prompt_ids, completion_ids, C, offsets):
    """Per row (unpadded forward, prompt + completion): log p of each completion token and the entropy of
    the distribution predicting it, float64, padded to C with zeros.

    Positions: TRL runs the model on the left-padded batch without position_ids, so transformers numbers
    the positions 0..L-1 over the padded row: a row's first prompt token is at position `offset` = the
    longest prompt of this process's generation batch minus the row's prompt length. RoPE tables are
    float32 in transformers, so the offset changes the results at the 1e-7 level: keep it."""
    rows_lp, rows_ent = [], []
    for p, c, off in zip(prompt_ids, completion_ids, offsets):
        ids = torch.tensor([p + c])
        pos = torch.arange(off, off + len(p) + len(c)).unsqueeze(0)
        hidden = model.model(input_ids=ids, position_ids=pos).last_hidden_state[0]  # [P+L, H]
        h = hidden[len(p) - 1: len(p) + len(c) - 1]  # positions predicting the completion tokens
        z = h @ model.get_output_embeddings().weight.t()
        m = z.max(dim=-1, keepdim=True).values.detach()
        e = torch.exp(z - m)
        s = e.sum(-1)
        log_z = m.squeeze(-1) + torch.log(s)
        lp = z.gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1) - log_z
        ent = log_z - (e * z).sum(-1) / s
        pad = C - len(c)
        rows_lp.append(torch.cat([lp, lp.new_zeros(pad)]))
        rows_ent.append(torch.cat([ent, ent.new_zeros(pad)]))
    return torch.stack(rows_lp), torch.stack(rows_ent)


def float32_quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    # torch.quantile on float32: rank = float32(q) * (n - 1) in float32, then torch.lerp of the neighbours
    s = torch.sort(values.float()).values
    n = s.numel()
    rank = torch.tensor(q, dtype=torch.float32) * torch.tensor(float(n - 1), dtype=torch.float32)
    lo = int(torch.floor(rank))
    hi = min(lo + 1, n - 1)
    w = rank - torch.floor(rank)
    return torch.lerp(s[lo], s[hi], w)


def replay(case_dir: Path, tol: float, metric_tol: float) -> list[str]:
    case = json.loads((case_dir / "case.json").read_text())
    cfg = case["grpo_config"]
    W = case["num_processes"]
    G, C, B = cfg["num_generations"], cfg["max_completion_length"], cfg["per_device_train_batch_size"]
    GA, S, mu = cfg["gradient_accumulation_steps"], cfg["steps_per_generation_resolved"], cfg["num_iterations"]
    loss_type, level = cfg["loss_type"], cfg["importance_sampling_level"]
    eps_low = cfg["epsilon"]
    eps_high = cfg["epsilon_high"] if cfg["epsilon_high"] is not None else cfg["epsilon"]
    delta, beta, q = cfg["delta"], cfg["beta"], cfg["top_entropy_quantile"]
    bias_corrected_kl = cfg["use_bias_correction_kl"]
    rw = case["rewards"]
    weights32 = torch.tensor(cfg["reward_weights"] or [1.0] * len(rw["functions"]), dtype=torch.float32)
    eos = set(case["eos_token_ids"]) | {case["pad_token_id"]}

    rollouts = {}
    for line in (case_dir / "rollouts.jsonl").read_text().splitlines():
        r = json.loads(line)
        rollouts[(r["step"], r["rank"])] = r
    model_dir = case_dir.parent / "model"
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float64)
    ref = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float64) if beta != 0 else None
    named = list(model.named_parameters())
    groups = [
        {"params": [p for n, p in named if not no_decay(n)], "weight_decay": cfg["weight_decay"]},
        {"params": [p for n, p in named if no_decay(n)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg["learning_rate"], betas=(cfg["adam_beta1"], cfg["adam_beta2"]),
                            eps=cfg["adam_epsilon"], foreach=False, fused=False)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(cfg["lr_scheduler_type"], cfg["warmup_steps"], cfg["max_steps"]))
    h5 = h5py.File(case_dir / "weights.h5", "r")
    metrics = [json.loads(l) for l in (case_dir / "metrics.jsonl").read_text().splitlines()]
    problems = []

    def check(what, got, want, rtol):
        if want is None:
            return
        if not math.isclose(got, want, rel_tol=rtol, abs_tol=rtol):
            problems.append(f"{case['name']}: {what}: replay {got!r} vs TRL {want!r}")

    gen_data = None
    step_metrics: dict[str, list] = {}
    tokens_seen = 0  # TRL's state.num_input_tokens_seen: prompt + completion tokens of every generation, all ranks
    tr_loss = [torch.tensor(0.0) for _ in range(W)]  # float32 per rank, as Trainer._tr_loss
    skip_old = GA % (S * mu) == 0
    for k in range(cfg["max_steps"] * GA):
        if k % (S * mu) == 0:  # a new generation
            g = k // (S * mu)
            recs = [rollouts[(g, r)] for r in range(W)]
            all_rpf, all_ids = [], []
            for rec in recs:
                for ids, text, got in zip(rec["completion_ids"], rec["completions"], rec["rewards_per_func"]):
                    want = []
                    for f in rw["functions"]:
                        want.append(length_reward(ids, rw["length_target"]) if f == "length"
                                    else format_reward(text, rw["format_pattern"]))
                    assert want == got, (case["name"], g, want, got)
                    all_rpf.append(got)
                    all_ids.append(ids)
            rpf = torch.tensor(all_rpf, dtype=torch.float32)
            adv = advantages_of(rpf, weights32, G, cfg["scale_rewards"], cfg["multi_objective_aggregation"])
            recorded = torch.tensor([a for rec in recs for a in rec["advantages"]], dtype=torch.float32)
            if not torch.equal(adv, recorded):
                d = (adv - recorded).abs().max().item()
                problems.append(f"{case['name']}: generation {g}: advantages differ (max {d:.3g}) from TRL's")
            adv = recorded
            # generation metrics (TRL's float32 values)
            rewards = (rpf * weights32).sum(1)
            step_metrics.setdefault("reward", []).append(rewards.mean().item())
            step_metrics.setdefault("reward_std", []).append(unbiased_std(rewards).item())
            for i, f in enumerate(rw["functions"]):
                step_metrics.setdefault(f"rewards/{f}/mean", []).append(rpf[:, i].mean().item())
            tokens_seen += sum(len(p) + len(c) for rec in recs for p, c in zip(rec["prompt_ids"], rec["completion_ids"]))
            step_metrics["num_tokens"] = [float(tokens_seen)]  # replaced, not appended, at each generation
            lengths = torch.tensor([len(i) for i in all_ids]).float()
            step_metrics.setdefault("completions/mean_length", []).append(lengths.mean().item())
            truncated = torch.tensor([i[-1] not in eos for i in all_ids])
            step_metrics.setdefault("completions/clipped_ratio", []).append(truncated.float().mean().item())
            masks_all = []
            gen_data = []
            n_local = len(recs[0]["completion_ids"])
            for r, rec in enumerate(recs):
                comp = rec["completion_ids"]
                mask = torch.zeros(len(comp), C)
                for i, ids in enumerate(comp):
                    keep = not (cfg["mask_truncated_completions"] and ids[-1] not in eos)
                    mask[i, :len(ids)] = 1.0 if keep else 0.0
                masks_all.append(mask)
                max_p = max(len(p) for p in rec["prompt_ids"])
                offsets = [max_p - len(p) for p in rec["prompt_ids"]]
                with torch.no_grad():
                    old = None if skip_old else logps_and_entropies(model, rec["prompt_ids"], comp, C, offsets)[0]
                    ref_lp = logps_and_entropies(ref, rec["prompt_ids"], comp, C, offsets)[0] if beta != 0 else None
                perm = rec["shuffle"]
                gen_data.append({
                    "offsets": [offsets[j] for j in perm],
                    "prompt_ids": [rec["prompt_ids"][j] for j in perm],
                    "completion_ids": [comp[j] for j in perm],
                    "mask": mask[perm],
                    "adv": adv[r * n_local:(r + 1) * n_local][perm],
                    "old": None if old is None else old[perm],
                    "ref": None if ref_lp is None else ref_lp[perm],
                })
            num_items = sum(m.sum() for m in masks_all)  # over the whole generation batch, all ranks
        mb = k % S
        sl = slice(mb * B, (mb + 1) * B)
        per_rank = []
        for r in range(W):
            d = gen_data[r]
            lp, ent = logps_and_entropies(model, d["prompt_ids"][sl], d["completion_ids"][sl], C, d["offsets"][sl])
            per_rank.append((lp, ent, d["mask"][sl]))
        ent_mask = None
        if q < 1.0:
            pool = torch.cat([ent.detach()[mask.bool()] for _, ent, mask in per_rank])
            threshold = float32_quantile(pool, 1 - q)
        total_loss = 0.0
        kl_num = kl_den = ent_num = ent_den = 0.0
        # clip-ratio sums and counts are float32 in TRL (bool.float() times the int mask; mask.sum().float())
        f32 = lambda: [torch.tensor(0.0), torch.tensor(0.0)]  # noqa: E731
        clip = {"low": f32(), "high": f32(), "region": f32()}
        cispo_clip = f32()
        for r, (lp, ent, mask) in enumerate(per_rank):
            d = gen_data[r]
            A = d["adv"][sl].unsqueeze(1)
            old = lp.detach() if d["old"] is None else d["old"][sl]
            log_ratio = lp - old
            if level == "token":
                liw = log_ratio
            else:
                liw = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
            coef_1 = torch.exp(liw)
            if beta != 0:
                ref_lp = d["ref"][sl]
                kl = torch.exp(ref_lp - lp) - (ref_lp - lp) - 1
                if bias_corrected_kl:  # times the ratio before the delta cap, gradient included; logged as kl too
                    kl = kl * coef_1
            if loss_type == "cispo":
                ptl = -torch.clamp(coef_1, max=eps_high).detach() * A * lp
            elif loss_type == "sapo":
                t = torch.where(A > 0, cfg["sapo_temperature_pos"], cfg["sapo_temperature_neg"])
                ptl = -(torch.sigmoid(t * (coef_1 - 1)) * 4 / t) * A
            else:
                coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
                if delta is not None:
                    coef_1 = torch.clamp(coef_1, max=delta)
                ptl = -torch.min(coef_1 * A, coef_2 * A)
            if q < 1.0:
                em = ((ent.detach() * mask) >= threshold) & mask.bool()
                ptl = ptl * em
            if beta != 0:
                ptl = ptl + beta * kl
            if loss_type in ("grpo", "sapo"):
                loss = ((ptl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / GA
            elif loss_type == "bnpo":
                loss = (ptl * mask).sum() / mask.sum().clamp(min=1.0) / GA
            elif loss_type == "dr_grpo":
                loss = (ptl * mask).sum() / (ptl.size(0) * C) / GA
            elif loss_type in ("dapo", "cispo"):
                loss = (ptl * mask).sum() / (num_items.clamp(min=1.0) / W * GA / S)
            elif loss_type == "luspo":
                loss = (ptl * mask).sum(-1).mean() / GA
            total_loss = total_loss + loss / W  # DDP averages the ranks' gradients
            tr_loss[r] = (tr_loss[r].double() + loss.detach()).float()  # float32 += float64, in-place
            if beta != 0:
                kl_num += (kl.detach() * mask).sum().item()
                kl_den += mask.sum().item()
            ent_num += (ent.detach() * mask).sum().item()
            ent_den += mask.sum().item()
            def add(acc, x):
                x = x.float()
                if x.shape[1] == 1:  # sequence level: one value per sequence, every sequence counted
                    acc[0] = acc[0] + x.sum()
                    acc[1] = acc[1] + torch.tensor(float(x.shape[0]))
                else:
                    acc[0] = acc[0] + (x * mask).sum()
                    acc[1] = acc[1] + mask.sum()

            if loss_type == "cispo":
                add(cispo_clip, (coef_1 > eps_high) & (A > 0))
            elif loss_type != "sapo":
                lo = (coef_1 < 1 - eps_low) & (A < 0)
                hi = (coef_1 > 1 + eps_high) & (A > 0)
                for key, x in (("low", lo), ("high", hi), ("region", lo | hi)):
                    add(clip[key], x)
        total_loss.backward()
        step_metrics.setdefault("entropy", []).append(ent_num / max(ent_den, 1.0))
        if beta != 0:
            step_metrics.setdefault("kl", []).append(kl_num / max(kl_den, 1.0))
        if loss_type == "cispo":
            step_metrics.setdefault("cispo_clip_ratio", []).append(
                (cispo_clip[0] / cispo_clip[1].clamp(min=1.0)).item())
        elif loss_type != "sapo":
            for key in ("low", "high", "region"):
                step_metrics.setdefault(f"clip_ratio/{key}_mean", []).append(
                    (clip[key][0] / clip[key][1].clamp(min=1.0)).item())
        if (k + 1) % GA == 0:
            n = (k + 1) // GA
            params = [p for _, p in named]
            max_norm = cfg["max_grad_norm"]
            grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"))
            lr = sched.get_last_lr()[0]
            opt.step()
            sched.step()
            opt.zero_grad()
            if cfg["sync_ref_model"] and n % cfg["ref_model_sync_steps"] == 0:
                alpha = cfg["ref_model_mixup_alpha"]
                with torch.no_grad():
                    for tp, mp in zip(ref.parameters(), model.parameters()):
                        tp.mul_(1.0 - alpha).add_(mp, alpha=alpha)
            worst = 0.0
            for name, p in named:
                want = torch.from_numpy(h5[f"step_{n}"][name][()])
                worst = max(worst, (p.detach() - want).abs().max().item())
            if worst > tol:
                problems.append(f"{case['name']}: step {n}: weights differ by up to {worst:.3g}")
            m = metrics[n - 1]
            logged_loss = torch.stack(tr_loss).mean().item()  # all-gather of the float32 sums, mean
            check(f"step {n} loss", logged_loss, m.get("loss"), metric_tol)
            check(f"step {n} grad_norm", grad_norm.item(), m.get("grad_norm"), metric_tol)
            check(f"step {n} learning_rate", lr, m.get("learning_rate"), 1e-15)
            for key, vals in step_metrics.items():
                if key not in m:
                    problems.append(f"{case['name']}: step {n}: TRL logged no {key}")
                    continue
                check(f"step {n} {key}", sum(vals) / len(vals), m[key], metric_tol)
            step_metrics = {}
            tr_loss = [torch.tensor(0.0) for _ in range(W)]
            print(f"  {case['name']} step {n}: max |w - w_TRL| = {worst:.3g}", flush=True)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*")
    ap.add_argument("--root", type=Path, default=REPO / "tests" / "data" / "trl-steps")
    ap.add_argument("--tol", type=float, default=1e-10, help="largest weight difference accepted")
    ap.add_argument("--metric-tol", type=float, default=1e-12, help="relative (and absolute) tolerance on metrics")
    a = ap.parse_args()
    names = a.cases or sorted(p.name for p in a.root.iterdir() if (p / "case.json").exists())
    # the tool-calling cases (tools_calc, env_guess) need the tools' workers and TRL's tool loop to replay:
    # tests/trainer/parity_trl.py checks them through rayless, against TRL's own completions and masks
    skipped = [n for n in names if "agent" in json.loads((a.root / n / "case.json").read_text())]
    names = [n for n in names if n not in skipped]
    if skipped:
        print(f"skipped (tool-calling, checked by parity_trl.py): {', '.join(skipped)}")
    problems = []
    for name in names:
        problems += replay(a.root / name, a.tol, a.metric_tol)
    for p in problems:
        print("MISMATCH", p)
    print(f"{len(names)} cases, {len(problems)} mismatches")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
