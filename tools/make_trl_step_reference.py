#!/usr/bin/env python3
"""Generate the TRL step-replay fixtures in tests/data/trl-steps/.

Each case runs Hugging Face TRL's real GRPOTrainer (CPU, float64 weights) for a few optimizer steps on
the tiny Qwen2 model in tests/data/trl-steps/model. Generation is not sampled: the trainer's
single-turn generation method is replaced by one that returns completions drawn from a seeded RNG
(per case and generation), so everything after generation (decoding, rewards, advantages, old/ref
log-probs, shuffling, losses, optimizer) is TRL's own code. The rewards are Python versions of
rayless's built-in `length` and `format` rewards. What each case writes (case.json, rollouts.jsonl,
metrics.jsonl, weights.h5) is described in tests/data/trl-steps/README.md. A case may name its own
tokenizer (`tokenizer_file`): bos_prompts uses tokenizer-bos.json, the model's tokenizer.json plus a
post-processor that prepends <|bos|>, which the script writes into the fixture root when it runs that case.

Regenerate everything (from the repository root):

    tools/trl_steps/setup_venv.sh                       # once: venv at .venv-trl (or set TRL_VENV)
    .venv-trl/bin/python tools/make_trl_step_reference.py --out tests/data/trl-steps

One case only:          ... tools/make_trl_step_reference.py --out tests/data/trl-steps --case loss_grpo
List the cases:         ... tools/make_trl_step_reference.py --list
Check them without TRL: ... tools/trl_steps/replay_check.py

The model directory tests/data/trl-steps/model is made once by rayless itself and committed:

    build/rayless-bench init-model --config-json tools/trl_steps/model_config.json \\
        --out tests/data/trl-steps/model --seed 7 --tokenizer byte

Pinned versions: trl 1.16.0, transformers 5.24.0, torch 2.13.0 (CPU), accelerate 1.15.0, h5py.

Precision note: TRL 1.16 computes log-probabilities and entropies with a fused, chunked LM-head kernel
(trl/kernels/chunked_logprob.py) that works in float32 whatever the model dtype. By default this
script replaces that kernel with the same computation in the model's dtype (float64), so the whole
forward/backward is float64; `--native-lm-head` keeps TRL's float32 kernel instead (not used for the
committed fixtures). Everything else TRL does in float32 (rewards, advantages, some metrics) is left
untouched.

Two-process cases are launched with torchrun (`python -m torch.distributed.run --nproc_per_node 2`;
accelerate then runs MULTI_CPU with the gloo backend). Every case runs in its own subprocess with one intra-op thread per process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "trl-steps"
EOS_ID = 258
BOS_ID = 257  # <|bos|> of the byte tokenizer
BOS_TOKENIZER_FILE = "tokenizer-bos.json"  # written into the fixture root for the cases that use it
FORMAT_PATTERN = "[aeiou][aeiou]"
# characters the injected completions are made of: decode identically in Python and C++ and are
# untouched by transformers' clean_up_tokenization (no punctuation, no apostrophes)
COMPLETION_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789 "
VOWELS = "aeiou"

PROMPTS = [
    "count: abc",
    "spell: dog",
    "say hi",
    "list: 1 2 3",
    "echo: zebra",
    "next: a b",
    "reverse: stop",
    "sum: 2 3",
    "name a fruit",
    "copy: moon",
    "vowels: tree",
    "count: xyz",
    "repeat: ok",
    "add: 7 1",
    "word: sky",
    "digits: 42",
]

# ---------------------------------------------------------------------------------------------------
# Cases. Each entry overrides BASE (GRPOConfig arguments) and names the rewards.

BASE = dict(
    per_device_train_batch_size=8,
    gradient_accumulation_steps=1,
    steps_per_generation=None,
    num_generations=4,
    max_completion_length=8,
    max_steps=2,
    seed=42,
    temperature=1.0,
    learning_rate=2e-2,
    lr_scheduler_type="linear",
    warmup_steps=0,
    weight_decay=0.0,
    adam_beta1=0.9,
    adam_beta2=0.999,
    adam_epsilon=1e-8,
    max_grad_norm=1.0,
    num_iterations=1,
    beta=0.0,
    use_bias_correction_kl=False,  # TRL 1.16 defaults to True; only beta_bias_corrected_kl turns it on
    epsilon=0.2,
    epsilon_high=None,
    delta=None,
    loss_type="dapo",
    scale_rewards="group",
    multi_objective_aggregation="sum_then_normalize",
    importance_sampling_level="token",
    top_entropy_quantile=1.0,
    mask_truncated_completions=False,
    sapo_temperature_pos=1.0,
    sapo_temperature_neg=1.05,
    sync_ref_model=False,
    ref_model_mixup_alpha=0.6,
    ref_model_sync_steps=512,
    reward_weights=None,
)

# settings that make the run deterministic, float64 and free of side effects; not part of the math
FIXED = dict(
    bf16=False,
    fp16=False,
    gradient_checkpointing=False,
    logging_steps=1,
    logging_strategy="steps",
    report_to="none",
    save_strategy="no",
    eval_strategy="no",
    use_cpu=True,
    optim="adamw_torch",
    dataloader_num_workers=0,
    disable_tqdm=True,
    shuffle_dataset=True,
    disable_dropout=True,
    remove_unused_columns=False,
    model_init_kwargs={"dtype": "float64"},
    log_completions=False,
    top_p=1.0,
    top_k=0,
    min_p=None,
    repetition_penalty=1.0,
    cast_lm_head_to_fp32=False,
    use_vllm=False,
    entropy_coef=0.0,
    use_adaptive_entropy=False,
    off_policy_mask_threshold=None,
    vllm_importance_sampling_correction=False,
    include_num_input_tokens_seen="no",
    pad_to_multiple_of=None,
)

LENGTH = {"functions": ["length"], "length_target": 5}

CASES: dict[str, dict] = {}


# Settings of FIXED a case may change: the correction of completions another engine sampled
SAMPLING_CORRECTION = ("vllm_importance_sampling_correction", "vllm_importance_sampling_mode",
                       "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min",
                       "off_policy_mask_threshold")


def case(name, description, rewards=LENGTH, num_processes=1, tokenizer_file=None, agent=None,
         rollout_logprobs=None, correction=None, **grpo):
    """rollout_logprobs: None, or the standard deviation of the noise added to the model's own log-probs to make
    the sampler log-probs a rollout_func returns (see rollout_logprobs()); correction: FIXED's
    SAMPLING_CORRECTION settings for the case (such a case needs rollout_logprobs)."""
    assert name not in CASES, name
    unknown = set(grpo) - set(BASE)
    assert not unknown, f"{name}: unknown settings {unknown}"
    assert tokenizer_file in (None, BOS_TOKENIZER_FILE), tokenizer_file
    assert agent in (None, "tools", "environment"), agent
    assert not set(correction or {}) - set(SAMPLING_CORRECTION), correction
    assert correction is None or rollout_logprobs is not None, name
    CASES[name] = dict(description=description, rewards=rewards, num_processes=num_processes, grpo=grpo,
                       tokenizer_file=tokenizer_file, agent=agent, rollout_logprobs=rollout_logprobs,
                       correction=correction or {})


# 1. every loss type, mu = 1, one process
case("loss_grpo", "loss_type grpo, mu=1, 1 process", loss_type="grpo")
case("loss_bnpo", "loss_type bnpo, mu=1, 1 process", loss_type="bnpo")
case("loss_dr_grpo", "loss_type dr_grpo, mu=1, 1 process", loss_type="dr_grpo")
case("loss_dapo", "loss_type dapo, mu=1, 1 process", loss_type="dapo", max_steps=3)
case("loss_cispo", "loss_type cispo (epsilon_high 5.0, the recommended value), mu=1, 1 process",
     loss_type="cispo", epsilon_high=5.0)
case("loss_sapo", "loss_type sapo (default temperatures), mu=1, 1 process", loss_type="sapo")
case("loss_luspo", "loss_type luspo with importance_sampling_level sequence, mu=1, 1 process",
     loss_type="luspo", importance_sampling_level="sequence")
# 2. several micro-steps per generation, mu = 2
case("mu2_spg2_ga2", "dapo, num_iterations 2, steps_per_generation 2, GA 2 (old log-probs computed at generation)",
     per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2,
     max_steps=4, learning_rate=5e-2)
case("mu2_spg2_ga4", "dapo, num_iterations 2, steps_per_generation 2, GA 4 = spg*mu (one generation per optimizer "
     "step, both passes inside it: TRL skips the old log-prob pass)",
     per_device_train_batch_size=4, gradient_accumulation_steps=4, steps_per_generation=2, num_iterations=2,
     max_steps=2, learning_rate=5e-2)
case("ga4_spg2", "dapo, num_iterations 1, steps_per_generation 2, GA 4 > spg*mu (two generations per optimizer step)",
     per_device_train_batch_size=4, gradient_accumulation_steps=4, steps_per_generation=2, max_steps=2)
case("sapo_mu2", "sapo, num_iterations 2, steps_per_generation 2, GA 2 (soft gate with ratios != 1)",
     loss_type="sapo", per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2,
     num_iterations=2, max_steps=2, learning_rate=5e-2)
case("cispo_mu2", "cispo (epsilon_high 1.1 so the ratio cap binds), num_iterations 2, steps_per_generation 2, GA 2",
     loss_type="cispo", epsilon_high=1.1, per_device_train_batch_size=4, gradient_accumulation_steps=2,
     steps_per_generation=2, num_iterations=2, max_steps=2, learning_rate=5e-2)
# 3. KL against a reference model that follows the policy
case("beta_sync_ref", "beta 0.04, sync_ref_model every step with alpha 0.6, dapo, mu=1",
     beta=0.04, sync_ref_model=True, ref_model_sync_steps=1, ref_model_mixup_alpha=0.6)
case("beta_mu2", "beta 0.04 (no sync), grpo loss, num_iterations 2, steps_per_generation 2, GA 2",
     beta=0.04, loss_type="grpo", per_device_train_batch_size=4, gradient_accumulation_steps=2,
     steps_per_generation=2, num_iterations=2, max_steps=2, learning_rate=5e-2)
case("beta_bias_corrected_kl", "as beta_mu2 with use_bias_correction_kl (per-token KL times the importance ratio "
     "coef_1, TRL 1.16's default): beta 0.04, grpo loss, num_iterations 2, steps_per_generation 2, GA 2",
     beta=0.04, use_bias_correction_kl=True, loss_type="grpo", per_device_train_batch_size=4,
     gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2, max_steps=2, learning_rate=5e-2)
# 4. high-entropy token mask
case("top_entropy_q02", "top_entropy_quantile 0.2, dapo, mu=1", top_entropy_quantile=0.2)
# 5. truncated completions left out of the loss
case("mask_truncated", "mask_truncated_completions, dapo, mu=1", mask_truncated_completions=True)
# 6. reward scaling
case("scale_batch", "scale_rewards batch, dapo, mu=1", scale_rewards="batch")
case("scale_none", "scale_rewards none, dapo, mu=1", scale_rewards="none")
# 7. sequence-level importance sampling (GSPO)
case("is_sequence_mu2", "importance_sampling_level sequence, grpo loss, num_iterations 2, steps_per_generation 2, GA 2",
     importance_sampling_level="sequence", loss_type="grpo", per_device_train_batch_size=4,
     gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2, max_steps=2, learning_rate=1e-1)
# 8. asymmetric clipping and the two-sided cap
case("eps_high_delta_mu2", "epsilon_high 0.28, delta 1.5, dapo, num_iterations 2, steps_per_generation 2, GA 2",
     epsilon_high=0.28, delta=1.5, per_device_train_batch_size=4, gradient_accumulation_steps=2,
     steps_per_generation=2, num_iterations=2, max_steps=2, learning_rate=1e-1)
# 9. two reward functions
TWO = {"functions": ["length", "format"], "length_target": 5, "format_pattern": FORMAT_PATTERN}
case("two_rewards", "length + format rewards, weights [1.0, 0.5], sum_then_normalize", rewards=TWO,
     reward_weights=[1.0, 0.5])
case("two_rewards_nts", "length + format rewards, weights [1.0, 0.5], normalize_then_sum", rewards=TWO,
     reward_weights=[1.0, 0.5], multi_objective_aggregation="normalize_then_sum")
# optimizer and schedule knobs
case("optim_wd_cosine", "dapo with weight_decay 0.1 (no decay on biases and norms), cosine schedule, warmup 1 "
     "(step 1 runs at learning rate 0), adam_beta2 0.99, adam_epsilon 1e-6, max_grad_norm 0.5",
     max_steps=3, weight_decay=0.1, lr_scheduler_type="cosine", warmup_steps=1, adam_beta2=0.99, adam_epsilon=1e-6,
     max_grad_norm=0.5)
case("optim_constant_noclip", "dapo with a constant schedule and no gradient clipping (max_grad_norm 0)",
     lr_scheduler_type="constant", max_grad_norm=0.0, learning_rate=1e-2)
# 10. two processes
case("dp2_dapo", "2 processes, dapo, per_device 4 (one group per process), mu=1", num_processes=2,
     per_device_train_batch_size=4)
case("dp2_entropy_mu2", "2 processes, top_entropy_quantile 0.2 (threshold over both ranks), num_iterations 2, "
     "steps_per_generation 2, GA 2", num_processes=2, top_entropy_quantile=0.2, per_device_train_batch_size=4,
     gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2, max_steps=2, learning_rate=3e-2)
case("dp2_split_groups", "2 processes, per_device 3, steps_per_generation 2, GA 2: 6 rows per process, so the "
     "second group of 4 is split across the processes", num_processes=2, per_device_train_batch_size=3,
     gradient_accumulation_steps=2, steps_per_generation=2, max_steps=3)
# 11. a tokenizer whose post-processor adds BOS to a plain-text prompt (TRL: processing_class(text=prompts))
case("bos_prompts", "dapo, mu=1, 1 process, with tokenizer-bos.json as the processing class: the model's byte "
     "tokenizer plus a TemplateProcessing post-processor that prepends <|bos|> (257) to every prompt",
     tokenizer_file=BOS_TOKENIZER_FILE, loss_type="dapo")

# 12. completions from another engine: TRL's rollout_func returns them with the sampler's log-probs (the model's
# own, plus seeded noise, rounded to float32 as TRL holds them), which TRL's importance-sampling correction
# (vllm_importance_sampling_*: TRL applies it when generating with vLLM; see run_case) and off-policy mask
# (off_policy_mask_threshold) measure against the trainer's log-probs
case("is_token_truncate", "rollout_func log-probs (noise 0.6), token_truncate IS with C in [0.5, 2.0], dapo, mu=1",
     rollout_logprobs=0.6, correction=dict(vllm_importance_sampling_correction=True,
                                           vllm_importance_sampling_mode="token_truncate",
                                           vllm_importance_sampling_clip_min=0.5, vllm_importance_sampling_clip_max=2.0))
case("is_token_mask", "rollout_func log-probs (noise 0.6), token_mask IS with C in [0.5, 3.0], grpo loss, mu=1",
     loss_type="grpo", rollout_logprobs=0.6,
     correction=dict(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="token_mask",
                     vllm_importance_sampling_clip_min=0.5, vllm_importance_sampling_clip_max=3.0))
case("is_sequence_truncate", "rollout_func log-probs (noise 0.3), sequence_truncate IS with TRL's caps (C_max 3, no "
     "C_min), dapo, mu=1", rollout_logprobs=0.3,
     correction=dict(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="sequence_truncate",
                     vllm_importance_sampling_clip_min=None, vllm_importance_sampling_clip_max=3.0))
case("is_sequence_mask_mu2", "rollout_func log-probs (noise 0.3), sequence_mask IS (TRL's default mode) with C in "
     "[0.7, 1.5] so that both bounds mask, dapo, num_iterations 2, steps_per_generation 2, GA 2", rollout_logprobs=0.3,
     per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2, num_iterations=2,
     learning_rate=5e-2,
     correction=dict(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="sequence_mask",
                     vllm_importance_sampling_clip_min=0.7, vllm_importance_sampling_clip_max=1.5))
case("is_opsm", "rollout_func log-probs (noise 0.6), token_truncate IS (C_max 3) and off_policy_mask_threshold 0.1, "
     "grpo loss, mu=1", loss_type="grpo", rollout_logprobs=0.6,
     correction=dict(vllm_importance_sampling_correction=True, vllm_importance_sampling_mode="token_truncate",
                     vllm_importance_sampling_clip_min=None, vllm_importance_sampling_clip_max=3.0,
                     off_policy_mask_threshold=0.1))
case("opsm_without_is", "rollout_func log-probs (noise 0.6), no IS correction, off_policy_mask_threshold 0.1 "
     "against the sampler's log-probs, dapo, mu=1", rollout_logprobs=0.6,
     correction=dict(vllm_importance_sampling_correction=False, off_policy_mask_threshold=0.1))
case("dp2_is_token_truncate", "2 processes, rollout_func log-probs (noise 0.6), token_truncate IS with C in [0.5, "
     "2.0] (its metrics gathered over processes), dapo, per_device 4", num_processes=2, per_device_train_batch_size=4,
     rollout_logprobs=0.6, correction=dict(vllm_importance_sampling_correction=True,
                                           vllm_importance_sampling_mode="token_truncate",
                                           vllm_importance_sampling_clip_min=0.5, vllm_importance_sampling_clip_max=2.0))
# 13. tool calling (TRL's tools=[...]) and an environment (environment_factory): conversational prompts on
# the model of tests/data/agent/model (Qwen2.5's tool-calling template), scripted model turns; TRL runs the
# tools of tools/agent_workers/, appends their results through the template and masks them (tool_mask)
CALC = {"functions": ["answer", "length"], "length_target": 60, "answer_field": "answer"}
case("tools_calc", "tools=[add, multiply, divide] (tools/agent_workers/calculator.py), dapo, mu=1: scripted turns "
     "with calls, answers, a malformed call, an unknown tool, a raising tool, two rounds, string arguments typed by "
     "the schema and continuations cut by max_completion_length", rewards=CALC, agent="tools", max_completion_length=220)
GUESS = {"functions": ["length"], "length_target": 40}
case("env_guess", "environment_factory=GuessNumber (tools/agent_workers/guess_number.py): one instance per rollout, "
     "reset(**row) appended to the prompt, 0-4 guesses answered higher/lower/correct, get_reward as the GuessNumber "
     "column, dapo, mu=1", rewards=GUESS, agent="environment", max_completion_length=400)

# ---------------------------------------------------------------------------------------------------
# Rewards: Python versions of rayless's built-ins (src/rollout/rewards.cpp). The function names are the
# rayless names, since TRL names the metrics rewards/<__name__>/mean.


def make_rewards(spec):
    funcs = []
    for name in spec["functions"]:
        if name == "length":
            target = int(spec["length_target"])

            def length(prompts, completions, completion_ids, **kwargs):
                # tokens of the completion, EOS included (TRL passes the unpadded ids)
                return [-abs(float(target - len(ids))) for ids in completion_ids]

            funcs.append(length)
        elif name == "format":
            pattern = re.compile(spec["format_pattern"])

            def format(prompts, completions, completion_ids, **kwargs):  # noqa: A001 - rayless's name
                # a match anywhere in the decoded completion (PCRE2 search in rayless)
                return [1.0 if pattern.search(text) else 0.0 for text in completions]

            funcs.append(format)
        elif name == "answer":
            field = spec["answer_field"]

            def answer(prompts, completions, completion_ids, **kwargs):
                # rayless's numeric answer reward: the last number of the completion decoded without
                # special tokens, against the row's answer
                texts = [TOKENIZER_FOR_REWARDS[0].decode(ids, skip_special_tokens=True) for ids in completion_ids]
                return [numeric_answer(text, str(want)) for text, want in zip(texts, kwargs[field], strict=True)]

            funcs.append(answer)
        else:
            raise ValueError(name)
    return funcs


TOKENIZER_FOR_REWARDS = [None]  # set by run_case: rewards decode completion ids as rayless does


def numbers_in(text: str) -> list:
    """rayless's numbers_in (src/rewards/rewards.cpp): signs, digits with thousands commas, a fraction, an exponent."""
    out, i, n = [], 0, len(text)
    while i < n:
        sign = text[i] in "+-" and i + 1 < n and (text[i + 1].isdigit() or text[i + 1] == ".")
        j = i + 1 if sign else i
        if j >= n or not (text[j].isdigit() or (text[j] == "." and j + 1 < n and text[j + 1].isdigit())):
            i += 1
            continue
        digits = text[i] if sign else ""
        while j < n:
            c = text[j]
            if c.isdigit() or c == ".":
                digits += c
            elif c == "," and j + 1 < n and text[j + 1].isdigit() and "." not in digits:
                pass
            elif c in "eE" and j + 1 < n and (text[j + 1].isdigit() or (text[j + 1] in "+-" and j + 2 < n and text[j + 2].isdigit())):
                digits += c + text[j + 1]
                j += 1
            else:
                break
            j += 1
        digits = digits.rstrip(".")  # "42." ends a sentence
        prefix = re.match(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", digits)  # what strtod reads of it
        if prefix:
            out.append(float(prefix.group(0)))
        i = max(j, i + 1)
    return out


def numeric_answer(completion: str, expected: str) -> float:
    got, want = numbers_in(completion), numbers_in(expected)
    if not got or not want:
        return 0.0
    a, b = got[-1], want[-1]
    return 1.0 if abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b)) else 0.0


def rayless_overrides(grpo: dict, rewards: dict, tokenizer_file: str | None = None, agent: str | None = None,
                      correction: dict | None = None) -> list[str]:
    """`--set` strings giving rayless the settings of the TRL run. A case with its own tokenizer file has no
    tokenizer.path here: the replay sets it to the absolute path of case.json's tokenizer_file. A case with
    sampler log-probs gets the GRPOConfig's correction settings, `correction` (TRL's None = rayless's 0.0)."""

    def toml(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(toml(x) for x in v) + "]"
        raise TypeError(v)

    g = grpo
    out = {
        "model.path": "tests/data/trl-steps/model",
        "model.dtype": "float64",
        "model.device": "cpu",
        "tokenizer.path": "",
        "tokenizer.chat_template": "none",
        "data.path": "tests/data/trl-steps/prompts.jsonl",
        "data.prompt_field": "prompt",
        "generation.max_completion_length": g["max_completion_length"],
        "generation.temperature": float(g["temperature"]),
        "reward.functions": list(rewards["functions"]),
        "reward.reward_weights": [float(w) for w in (g["reward_weights"] or [])],
        "grpo.num_generations": g["num_generations"],
        "grpo.num_iterations": g["num_iterations"],
        "grpo.steps_per_generation": g["steps_per_generation"] or 0,
        "grpo.beta": float(g["beta"]),
        "grpo.use_bias_correction_kl": g["use_bias_correction_kl"],
        "grpo.epsilon": float(g["epsilon"]),
        "grpo.epsilon_high": float(g["epsilon_high"] or 0.0),
        "grpo.delta": float(g["delta"] or 0.0),
        "grpo.loss_type": g["loss_type"],
        "grpo.scale_rewards": g["scale_rewards"],
        "grpo.multi_objective_aggregation": g["multi_objective_aggregation"],
        "grpo.importance_sampling_level": g["importance_sampling_level"],
        "grpo.top_entropy_quantile": float(g["top_entropy_quantile"]),
        "grpo.mask_truncated_completions": g["mask_truncated_completions"],
        "grpo.sapo_temperature_pos": float(g["sapo_temperature_pos"]),
        "grpo.sapo_temperature_neg": float(g["sapo_temperature_neg"]),
        "grpo.sync_ref_model": g["sync_ref_model"],
        "grpo.ref_model_mixup_alpha": float(g["ref_model_mixup_alpha"]),
        "grpo.ref_model_sync_steps": g["ref_model_sync_steps"],
        "optim.learning_rate": float(g["learning_rate"]),
        "optim.lr_scheduler_type": g["lr_scheduler_type"],
        "optim.warmup_steps": g["warmup_steps"],
        "optim.weight_decay": float(g["weight_decay"]),
        "optim.adam_beta1": float(g["adam_beta1"]),
        "optim.adam_beta2": float(g["adam_beta2"]),
        "optim.adam_epsilon": float(g["adam_epsilon"]),
        "optim.max_grad_norm": float(g["max_grad_norm"]),
        "train.per_device_train_batch_size": g["per_device_train_batch_size"],
        "train.gradient_accumulation_steps": g["gradient_accumulation_steps"],
        "train.max_steps": g["max_steps"],
        "train.seed": g["seed"],
        "train.bf16": False,
        "train.gradient_checkpointing": False,
        "log.logging_steps": 1,
    }
    if tokenizer_file is not None:
        del out["tokenizer.path"]
    if "length" in rewards["functions"]:
        out["reward.length_target"] = int(rewards["length_target"])
        out["reward.length_unit"] = "tokens"
    if "format" in rewards["functions"]:
        out["reward.format_pattern"] = rewards["format_pattern"]
    if correction:
        settings = correction
        out["grpo.vllm_importance_sampling_correction"] = settings["vllm_importance_sampling_correction"]
        out["grpo.vllm_importance_sampling_mode"] = settings["vllm_importance_sampling_mode"]
        for key in ("vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min", "off_policy_mask_threshold"):
            out["grpo." + key] = float(settings[key] or 0.0)
    if "answer" in rewards["functions"]:
        out["reward.answer_field"] = rewards["answer_field"]
        out["reward.answer_mode"] = "numeric"
    if agent:  # conversational rows under "prompt", the model's own (tool-calling) template, the tools' workers
        out["model.path"] = str(AGENT_MODEL.relative_to(REPO))
        out["tokenizer.chat_template"] = "auto"
        out["data.prompt_field"] = "text"
        out["data.messages_field"] = "prompt"
        out["data.max_prompt_length"] = 2048  # prompts listing tools are ~1500 byte tokens; + the completion fits 4096
        if agent == "tools":
            out["tools.calculator.command"] = f"{AGENT_WORKERS} tools tools/agent_workers/calculator.py"
        else:
            out["environment.command"] = f"{AGENT_WORKERS} environment tools/agent_workers/guess_number.py GuessNumber"
    return [f"{k}={toml(v)}" for k, v in out.items()]


# ---------------------------------------------------------------------------------------------------
# tokenizer-bos.json: the model's tokenizer.json with a post-processor that prepends <|bos|>


def bos_tokenizer_json(model_dir: Path) -> str:
    """The model's tokenizer.json (loaded and written back by the `tokenizers` library, which reproduces it
    byte for byte) with post_processor = TemplateProcessing("<|bos|> $A", pair "<|bos|> $A <|bos|> $B")."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    assert tok.to_str(pretty=True) == (model_dir / "tokenizer.json").read_text(), "tokenizer.json does not round-trip"
    assert tok.token_to_id("<|bos|>") == BOS_ID, tok.token_to_id("<|bos|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", BOS_ID)])
    text = tok.to_str(pretty=True)
    assert Tokenizer.from_str(text).encode("abc").ids == [BOS_ID, 97, 98, 99]
    return text


def write_bos_tokenizer(out: Path, model_dir: Path) -> None:
    (out / BOS_TOKENIZER_FILE).write_text(bos_tokenizer_json(model_dir))


def load_processing_class(tokenizer_file: Path, model_dir: Path):
    """What TRL gets as processing_class for a case with its own tokenizer file: a PreTrainedTokenizerFast on
    that file with the pad and EOS tokens of the model's tokenizer_config.json, bos_token <|bos|>, and the
    sides TRL's own AutoProcessor.from_pretrained call uses (padding and truncation on the left)."""
    from transformers import PreTrainedTokenizerFast

    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    tok = PreTrainedTokenizerFast(tokenizer_file=str(tokenizer_file), eos_token=config["eos_token"],
                                  pad_token=config["pad_token"], bos_token="<|bos|>", padding_side="left",
                                  truncation_side="left")
    assert tok(text=["abc"])["input_ids"] == [[BOS_ID, 97, 98, 99]], tok(text=["abc"])["input_ids"]
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (BOS_ID, EOS_ID, 256)
    return tok


# ---------------------------------------------------------------------------------------------------
# Injected completions


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()[:8], "little")


def draw_generation(case_name: str, generation: int, n_rows: int, group: int, max_len: int, char_ids: dict,
                    rewards: list) -> list[list[int]]:
    """Completions of one global generation batch (all processes), rows in TRL's global order.

    Redraws a group until its combined rewards are not all equal, so advantages are non-zero."""
    out = []
    for g0 in range(0, n_rows, group):
        attempt = 0
        while True:
            rng = random.Random(_seed("trl-steps", case_name, generation, g0 // group, attempt))
            rows = [draw_completion(rng, max_len, char_ids) for _ in range(group)]
            texts = ["".join(c for c in text) for text, _ in rows]
            ids = [i for _, i in rows]
            totals = [sum(f([""] * group, texts, ids)[k] for f in rewards) for k in range(group)]
            if len(set(totals)) > 1:
                break
            attempt += 1
        out.extend(ids)
    return out


def draw_completion(rng: random.Random, max_len: int, char_ids: dict) -> tuple[str, list[int]]:
    truncated = rng.random() < 0.25
    length = max_len if truncated else rng.randint(1, max_len)
    n_text = length if truncated else length - 1
    chars = [rng.choice(COMPLETION_CHARS) for _ in range(n_text)]
    if n_text >= 2 and rng.random() < 0.4:  # give the format reward something to find
        k = rng.randrange(n_text - 1)
        chars[k], chars[k + 1] = rng.choice(VOWELS), rng.choice(VOWELS)
    ids = [char_ids[c] for c in chars] + ([] if truncated else [EOS_ID])
    return "".join(chars), ids


def rollout_logprobs(case_name: str, generation: int, rank: int, model, prompt_ids, completion_ids, temperature,
                     sigma: float) -> list[list[float]]:
    """The log-probs a rollout_func reports for its completions: the model's own (log-softmax of the logits
    divided by the temperature, each row alone, no padding) plus Gaussian noise of deviation sigma drawn from
    a seeded RNG per (case, generation, process, row), rounded to float32 (TRL builds a float32 tensor of them)."""
    import numpy as np
    import torch

    out = []
    with torch.no_grad():
        for row, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
            ids = torch.tensor([list(p) + list(c)])
            logits = model(input_ids=ids).logits[0, len(p) - 1:-1].to(torch.float64) / temperature
            own = logits.log_softmax(-1).gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1).tolist()
            rng = random.Random(_seed("trl-steps-logprobs", case_name, generation, rank, row))
            out.append([float(np.float32(v + rng.gauss(0.0, sigma))) for v in own])
    return out


class NoWeightSync:
    """What the trainer's vLLM backend is asked for on the rollout_func path: its weight sync (nothing to sync)."""

    def sync_weights(self):
        pass


# ---------------------------------------------------------------------------------------------------
# Tool-calling cases: conversational rows and scripted model turns


AGENT_MODEL = REPO / "tests" / "data" / "agent" / "model"
AGENT_WORKERS = "python3 tools/agent_workers/rayless_agent.py"  # run from the repository root
IM_END = "<|im_end|>"


def agent_rows(kind: str) -> list[dict]:
    """16 conversational rows: arithmetic questions with their answer (tools), or a secret number (environment)."""
    rng = random.Random(_seed("agent-rows", kind))
    rows = []
    for i in range(16):
        if kind == "tools":
            op, a, b = ("add", "multiply")[i % 2], rng.randint(1, 20), rng.randint(1, 20)
            question = f"What is {a} {'plus' if op == 'add' else 'times'} {b}?"
            rows.append({"prompt": [{"role": "user", "content": question}], "answer": str(a + b if op == "add" else a * b),
                         "op": op, "a": a, "b": b, "id": i})
        else:
            rows.append({"prompt": [{"role": "user", "content": "Find my number with the guess tool."}],
                         "secret": rng.randint(1, 100), "id": i})
    return rows


def tool_call(name: str, arguments) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


AGENT_SCRIPTS = ["call", "two", "direct", "malformed", "unknown", "raises", "strings", "long", "call"]


def agent_script(kind: str, rng: random.Random, row: dict, slot: int) -> list[str]:
    """The model's turns for one rollout (texts; the tool loop takes as many as the calls ask for). `slot`
    (the rollout's place in the run) picks the kind of script, so every kind appears."""
    if kind == "environment":
        secret, turns = row["secret"], []
        for k in range(slot % 5):
            guess = secret if rng.random() < 0.3 else rng.randint(1, 100)
            turns.append(tool_call("guess", {"number": guess}) + IM_END)
        return turns + [f"My number is {rng.randint(1, 100)}." + IM_END]
    op, a, b = row["op"], row["a"], row["b"]
    answer = a + b if op == "add" else a * b
    thought = rng.choice(["", "Let me use a tool. ", "ok "])
    script = AGENT_SCRIPTS[slot % len(AGENT_SCRIPTS)]
    if script == "call":
        return [thought + tool_call(op, {"a": a, "b": b}) + IM_END,
                f"The answer is {answer if rng.random() < 0.7 else answer + 1}." + IM_END]
    if script == "direct":
        return [f"It is {answer if rng.random() < 0.5 else answer - 1}." + IM_END]
    if script == "malformed":  # not JSON: TRL reads the turn as text and calls nothing
        return [thought + '<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call>' + IM_END]
    if script == "unknown":
        return [tool_call("power", {"a": a, "b": b}) + IM_END, "I could not compute it." + IM_END]
    if script == "raises":
        return [tool_call("divide", {"a": a, "b": 0}) + IM_END, f"Maybe {answer}." + IM_END]
    if script == "two":
        return [tool_call("add", {"a": a, "b": b}) + IM_END, tool_call("multiply", {"a": a + b, "b": 2}) + IM_END,
                f"Twice the sum is {2 * (a + b)}." + IM_END]
    if script == "long":  # the continuation runs past max_completion_length: cut
        return [tool_call(op, {"a": a, "b": b}) + IM_END, "x" * 150 + IM_END]
    # string arguments: typed by the tool's schema before the call
    return [tool_call(op, {"a": str(a), "b": str(b)}) + IM_END, f"The answer is {answer}." + IM_END]


class ScriptedTurns:
    """Plays the scripted turns into TRL's generation: the first call of a generation gets every row's first
    turn; each later call (the tool loop's continuations) is matched to its rows by the conversation so far,
    and gets their next turns. Keeps what TRL used of each turn (cut as TRL cuts it) for the replay file."""

    def __init__(self, tokenizer, max_completion_length):
        self.tokenizer = tokenizer
        self.max_completion_length = max_completion_length
        self.open = False

    def start(self, prompt_ids, scripts):
        self.prompts = [list(map(int, p)) for p in prompt_ids]
        self.turns = [[self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in script] for script in scripts]
        self.used = [[list(t[0])] for t in self.turns]
        self.so_far = [list(t[0]) for t in self.turns]
        self.open = True
        return [list(t[0]) for t in self.turns]

    def continue_(self, conversations):
        out, taken = [], set()
        for pct in conversations:
            pct = list(map(int, pct))
            row = next(i for i in range(len(self.prompts))
                       if i not in taken and len(self.used[i]) < len(self.turns[i])
                       and pct[:len(self.prompts[i]) + len(self.so_far[i])] == self.prompts[i] + self.so_far[i])
            taken.add(row)
            ids = list(self.turns[row][len(self.used[row])])
            budget = self.max_completion_length - (len(pct) - len(self.prompts[row]))
            self.used[row].append(ids[:max(budget, 0)])
            self.so_far[row] = pct[len(self.prompts[row]):] + ids[:max(budget, 0)]
            out.append(ids)
        return out


# ---------------------------------------------------------------------------------------------------
# One case, inside the (possibly distributed) training process


def run_case(name: str, out_dir: Path, model_dir: Path, native_lm_head: bool) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import accelerate
    import datasets
    import h5py
    import transformers
    import trl
    import trl.trainer.grpo_trainer as grpo_mod
    import trl.trainer.utils as trl_utils
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    spec = CASES[name]
    grpo = dict(BASE)
    grpo.update(spec["grpo"])
    rewards_spec = spec["rewards"]
    reward_funcs = make_rewards(rewards_spec)

    if not native_lm_head:
        trl_utils._ChunkedLogProbFunction = Float64LogProbs

    tmp = Path(tempfile.mkdtemp(prefix=f"trl-steps-{name}-"))
    fixed = dict(FIXED, model_init_kwargs={"dtype": torch.float64})  # create_model_from_path wants the dtype object
    fixed.update(spec["correction"])
    args = GRPOConfig(output_dir=str(tmp / "out"), **grpo, **fixed)
    rank = args.process_index
    world = args.world_size
    assert world == spec["num_processes"], f"{name}: launched with {world} processes, case wants {spec['num_processes']}"

    agent = spec["agent"]
    if agent:
        model_dir = AGENT_MODEL
        rows = agent_rows(agent)
    else:
        rows = [{"prompt": p, "id": i} for i, p in enumerate(PROMPTS)]
    dataset = datasets.Dataset.from_list(rows)

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    TOKENIZER_FOR_REWARDS[0] = tokenizer
    char_ids = {}
    for c in COMPLETION_CHARS:
        ids = tokenizer(c, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, (c, ids)
        char_ids[c] = ids[0]
    assert tokenizer.eos_token_id == (260 if agent else EOS_ID), tokenizer.eos_token_id  # agent model: <|im_end|>, as Qwen ships
    processing_class = None  # TRL loads the model's own tokenizer (AutoProcessor.from_pretrained)
    if spec["tokenizer_file"]:
        tokenizer_path = out_dir.parent / spec["tokenizer_file"]
        assert tokenizer_path.read_text() == bos_tokenizer_json(model_dir), f"{tokenizer_path} is stale"
        processing_class = load_processing_class(tokenizer_path, model_dir)

    records = []  # one per generation on this process
    state = {"generation": 0, "current": None}

    original_single_turn = GRPOTrainer._generate_single_turn

    def injected_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        n = len(prompt_ids)
        g = state["generation"]
        all_rows = draw_generation(name, g, n * self.accelerator.num_processes, self.num_generations,
                                   self.max_completion_length, char_ids, reward_funcs)
        completion_ids = all_rows[rank * n:(rank + 1) * n]
        state["current"] = {"step": g, "rank": rank, "prompt_ids": [list(map(int, p)) for p in prompt_ids],
                            "completion_ids": [list(c) for c in completion_ids]}
        if spec["tokenizer_file"]:  # the post-processor's BOS, then the prompt's bytes
            assert all(p[:1] == [BOS_ID] and BOS_ID not in p[1:] for p in state["current"]["prompt_ids"])
        return [list(c) for c in completion_ids], None

    scripted = ScriptedTurns(tokenizer, grpo["max_completion_length"])

    def agent_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if scripted.open:  # the tool loop continues some rows
            return scripted.continue_(prompt_ids), None
        n = len(prompt_ids)
        g = state["generation"]
        world_rows = n * self.accelerator.num_processes
        scripts = [agent_script(agent, random.Random(_seed("trl-steps", name, g, rank * n + k)), state["inputs"][k],
                                g * world_rows + rank * n + k) for k in range(n)]
        state["current"] = {"step": g, "rank": rank, "prompt_ids": [list(map(int, p)) for p in prompt_ids]}
        return scripted.start(prompt_ids, scripts), None

    assert original_single_turn is not None
    GRPOTrainer._generate_single_turn = agent_single_turn if agent else injected_single_turn

    original_generate = GRPOTrainer._generate

    def recorded_generate(self, prompts):
        out = original_generate(self, prompts)
        if agent:  # TRL's final completions and tool masks, and the turns it used
            cur = state["current"]
            cur["completion_ids"] = [list(map(int, c)) for c in out[1]]
            cur["trl_tool_mask"] = [list(map(int, m)) for m in out[2]]
            cur["completion_turns"] = scripted.used
            scripted.open = False
        return out

    GRPOTrainer._generate = recorded_generate

    def injected_rollout_func(prompts, trainer):
        # the same completions as the single-turn injection, returned by TRL's rollout_func with log-probs
        prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
        completion_ids, _ = injected_single_turn(trainer, prompt_ids, None, None, trainer.num_generations)
        logprobs = rollout_logprobs(name, state["generation"], rank, trainer.model, prompt_ids, completion_ids,
                                    trainer.temperature, spec["rollout_logprobs"])
        state["current"]["logprobs"] = logprobs
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    original_rewards = GRPOTrainer._calculate_rewards

    def recorded_rewards(self, inputs, prompts, completions, completion_ids_list):
        out = original_rewards(self, inputs, prompts, completions, completion_ids_list)
        n = len(prompts)
        cur = state["current"]
        cur["prompts"] = list(prompts)
        cur["rows"] = [{k: v for k, v in row.items()} for row in inputs]
        cur["completions"] = list(completions)
        cur["completion_ids_seen_by_rewards"] = [list(c) for c in completion_ids_list]
        cur["rewards_per_func"] = out[rank * n:(rank + 1) * n].tolist()
        cur["rewards_dtype"] = str(out.dtype)
        return out

    GRPOTrainer._calculate_rewards = recorded_rewards

    original_score = GRPOTrainer._generate_and_score_completions

    def recorded_score(self, inputs):
        state["inputs"] = inputs
        out = original_score(self, inputs)
        cur = state["current"]
        cur["advantages"] = out["advantages"].tolist()
        cur["advantages_dtype"] = str(out["advantages"].dtype)
        return out

    GRPOTrainer._generate_and_score_completions = recorded_score

    original_shuffle = grpo_mod.shuffle_sequence_dict

    def recorded_shuffle(seq_dict):
        n = len(next(v for v in seq_dict.values() if v is not None))
        rng_state = torch.get_rng_state()
        permutation = torch.randperm(n)
        torch.set_rng_state(rng_state)
        shuffled = original_shuffle(seq_dict)  # draws the same permutation from the same state
        assert torch.equal(shuffled["advantages"], seq_dict["advantages"][permutation]), "shuffle not reproduced"
        assert torch.equal(shuffled["completion_ids"], seq_dict["completion_ids"][permutation])
        cur = state["current"]
        assert cur is not None and "shuffle" not in cur
        cur["shuffle"] = permutation.tolist()
        # completion ids as TRL holds them (right-padded) must be what was injected
        for row, ids in zip(seq_dict["completion_ids"].tolist(), cur["completion_ids"], strict=True):
            assert row[:len(ids)] == ids and all(t == tokenizer.pad_token_id for t in row[len(ids):])
        assert cur["completion_ids_seen_by_rewards"] == cur["completion_ids"]
        del cur["completion_ids_seen_by_rewards"]
        records.append(cur)
        state["current"] = None
        state["generation"] += 1
        return shuffled

    grpo_mod.shuffle_sequence_dict = recorded_shuffle

    weights = {}

    class CaptureWeights(TrainerCallback):
        def on_step_end(self, args, state_, control, model=None, **kwargs):
            params = {n: p.detach().to(torch.float64).cpu().clone() for n, p in model.named_parameters()}
            if world > 1:
                flat = torch.cat([p.reshape(-1) for p in params.values()])
                gathered = [torch.empty_like(flat) for _ in range(world)]
                torch.distributed.all_gather(gathered, flat)
                for other in gathered[1:]:
                    assert torch.equal(other, gathered[0]), "processes disagree on the weights"
            weights[state_.global_step] = {n: p.numpy() for n, p in params.items()}

    agent_kwargs = {}
    if agent == "tools":
        calculator = load_module(REPO / "tools" / "agent_workers" / "calculator.py", "calculator")
        agent_kwargs["tools"] = [calculator.add, calculator.multiply, calculator.divide]
    elif agent == "environment":
        guess_number = load_module(REPO / "tools" / "agent_workers" / "guess_number.py", "guess_number")
        agent_kwargs["environment_factory"] = guess_number.GuessNumber
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
        processing_class=processing_class,
        callbacks=[CaptureWeights()],
        rollout_func=injected_rollout_func if spec["rollout_logprobs"] is not None else None,
        **agent_kwargs,
    )
    if spec["rollout_logprobs"] is not None:
        # TRL applies its importance-sampling correction when it generates with vLLM (use_vllm); vLLM does not
        # run here, so the trainer is told it does after construction, with a weight sync that does nothing: the
        # completions and their log-probs come from rollout_func, and everything after is TRL's own code
        trainer.use_vllm = True
        trainer.vllm_generation = NoWeightSync()
        trainer._last_loaded_step = -1
    assert trainer.model.dtype == torch.float64
    if processing_class is not None:
        assert trainer.processing_class is processing_class
    assert EOS_ID in trainer.eos_token_ids, trainer.eos_token_ids  # [258, 260]: tokenizer + generation_config.json
    trainer.train()

    if world > 1:
        gathered = [None] * world
        torch.distributed.all_gather_object(gathered, records)
        all_records = [r for per_rank in gathered for r in per_rank]
    else:
        all_records = records
    if rank != 0:
        return

    all_records.sort(key=lambda r: (r["step"], r["rank"]))
    log = [dict(e) for e in trainer.state.log_history if "loss" in e and "train_runtime" not in e]
    assert [e["step"] for e in log] == list(range(1, grpo["max_steps"] + 1)), [e["step"] for e in log]
    assert sorted(weights) == list(range(1, grpo["max_steps"] + 1)), sorted(weights)

    out_dir.mkdir(parents=True, exist_ok=True)
    grpo_config = {k: grpo[k] for k in BASE}
    grpo_config.update(FIXED)
    if spec["correction"]:
        grpo_config.update({k: getattr(args, k) for k in SAMPLING_CORRECTION})
    if spec["rollout_logprobs"] is not None:
        grpo_config["use_vllm"] = "set on the trainer after construction (see tools/make_trl_step_reference.py)"
        grpo_config["rollout_func"] = "completions and their log-probs (model's own + noise)"
        grpo_config["rollout_logprobs_noise"] = spec["rollout_logprobs"]
    grpo_config["steps_per_generation_resolved"] = args.steps_per_generation
    grpo_config["generation_batch_size_resolved"] = args.generation_batch_size
    case_json = {
        "name": name,
        "description": spec["description"],
        "num_processes": world,
        "max_steps": grpo["max_steps"],
        "trl_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "accelerate_version": accelerate.__version__,
        "lm_head": "trl-float32-kernel" if native_lm_head else "float64",
        "prompts_file": "prompts.jsonl",
        **({"tokenizer_file": spec["tokenizer_file"]} if spec["tokenizer_file"] else {}),
        **({"model": str(AGENT_MODEL.relative_to(REPO)), "agent": agent} if agent else {}),
        "eos_token_ids": list(trainer.eos_token_ids),
        "pad_token_id": trainer._tokenizer.pad_token_id,
        "grpo_config": grpo_config,
        "rayless_overrides": rayless_overrides(grpo, rewards_spec, spec["tokenizer_file"], agent,
                                               {k: getattr(args, k) for k in SAMPLING_CORRECTION} if spec["correction"] else None),
        "rewards": {
            "functions": rewards_spec["functions"],
            "reward_weights": grpo["reward_weights"],
            **({"length_target": rewards_spec["length_target"], "length_unit": "tokens"}
               if "length" in rewards_spec["functions"] else {}),
            **({"format_pattern": rewards_spec["format_pattern"], "format_match": "search"}
               if "format" in rewards_spec["functions"] else {}),
        },
        "dropped_metrics": ["step_time"],
    }
    write_json(out_dir / "case.json", case_json)

    with open(out_dir / "rollouts.jsonl", "w") as f:
        for r in all_records:
            line = {k: r[k] for k in ("step", "rank", "prompt_ids", "prompts", "rows", "completion_ids", "shuffle",
                                      "rewards_per_func", "advantages", "completions")}
            if "logprobs" in r:
                line["logprobs"] = r["logprobs"]
            if agent:
                line.update(completion_turns=r["completion_turns"], trl_tool_mask=r["trl_tool_mask"])
            f.write(json.dumps(line, sort_keys=False) + "\n")
    if agent:
        with open(out_dir / "prompts.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    with open(out_dir / "metrics.jsonl", "w") as f:
        for e in log:
            e.pop("step_time", None)
            f.write(json.dumps(e) + "\n")

    with h5py.File(out_dir / "weights.h5", "w", libver="earliest", track_order=False) as h5:
        for step in sorted(weights):
            grp = h5.create_group(f"step_{step}")
            for pname in sorted(weights[step]):
                grp.create_dataset(pname, data=weights[step][pname].astype(np.float64), track_times=False)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{name}: wrote {out_dir}", flush=True)


class Float64LogProbs:
    """Stand-in for TRL's chunked LM-head kernel (trl/kernels/chunked_logprob.py) computing the same
    quantities in the dtype of the hidden states (float64 here) with plain autograd.

    Same call signature as ChunkedLogProbFunction.apply. log p(target) = z_t - logZ, and the entropy
    is logZ - sum_j e_j z_j / sum_j e_j with e_j = exp(z_j - max z), logZ = max z + log sum_j e_j: the
    formulas of the TRL kernel, without its float32 accumulators."""

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, final_logit_softcapping, logit_scale, outputs):
        import torch

        unsupported = set(outputs) - {"log_probs", "entropy"}
        assert not unsupported, unsupported
        z = hidden @ weight.t()
        if bias is not None:
            z = z + bias
        z = z * logit_scale
        if final_logit_softcapping is not None:
            z = final_logit_softcapping * torch.tanh(z / final_logit_softcapping)
        z = z * (1 / temperature)
        m = z.max(dim=-1, keepdim=True).values.detach()
        e = torch.exp(z - m)
        s = e.sum(dim=-1)
        log_z = m.squeeze(-1) + torch.log(s)
        log_probs = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
        entropy = log_z - (e * z).sum(dim=-1) / s if "entropy" in outputs else None
        return log_probs, entropy, None, None, None


def load_module(path: Path, name: str):
    import importlib.util

    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------------
# Orchestration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(name: str, out: Path, model_dir: Path, native_lm_head: bool) -> None:
    spec = CASES[name]
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0", TRL_EXPERIMENTAL_SILENCE="1",
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", HF_DATASETS_DISABLE_PROGRESS_BARS="1",
               ACCELERATE_MIXED_PRECISION="no")
    worker = [str(Path(__file__).resolve()), "--worker", name, "--out", str(out), "--model", str(model_dir)]
    if native_lm_head:
        worker.append("--native-lm-head")
    if spec["num_processes"] == 1:
        cmd = [sys.executable] + worker
    else:
        # accelerate launch --cpu only runs several processes through mpirun; torchrun sets the same environment
        # (RANK, WORLD_SIZE, MASTER_ADDR...) that accelerate reads, and accelerate picks gloo on CPU
        env["ACCELERATE_USE_CPU"] = "true"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node",
               str(spec["num_processes"]), "--master_addr", "127.0.0.1", "--master_port", str(free_port())] + worker
    print(f"== {name}: {spec['description']}", flush=True)
    subprocess.run(cmd, env=env, check=True, cwd=str(REPO))


def write_readme_data(out: Path) -> None:
    with open(out / "prompts.jsonl", "w") as f:
        for i, p in enumerate(PROMPTS):
            f.write(json.dumps({"prompt": p, "id": i}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="fixture root (default tests/data/trl-steps)")
    parser.add_argument("--model", type=Path, default=None, help="model directory (default OUT/model)")
    parser.add_argument("--case", action="append", default=[], help="run only this case (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--native-lm-head", action="store_true",
                        help="keep TRL's float32 LM-head kernel (default: the same math in float64)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.list:
        for name, spec in CASES.items():
            print(f"{name:24s} {spec['num_processes']}p  {spec['description']}")
        return
    model_dir = (a.model or a.out / "model").resolve()
    if a.worker:
        run_case(a.worker, a.out / a.worker, model_dir, a.native_lm_head)
        return
    assert (model_dir / "config.json").exists(), f"no model in {model_dir} (see the docstring: rayless-bench init-model)"
    names = a.case or list(CASES)
    for n in names:
        if n not in CASES:
            sys.exit(f"unknown case {n!r}; --list shows them")
    a.out.mkdir(parents=True, exist_ok=True)
    write_readme_data(a.out)
    if any(CASES[n]["tokenizer_file"] == BOS_TOKENIZER_FILE for n in names):
        write_bos_tokenizer(a.out, model_dir)
    for n in names:
        if (a.out / n).exists():
            shutil.rmtree(a.out / n)
        launch(n, a.out.resolve(), model_dir, a.native_lm_head)


if __name__ == "__main__":
    main()
