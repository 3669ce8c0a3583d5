#!/usr/bin/env python3
"""`rayless config show` on an empty config equals TRL's GRPOConfig() for every key the two share.

tests/data/grpo_config_defaults.json holds GRPOConfig's declared defaults, written by
tools/trl_steps/dump_grpo_defaults.py. TRL's None ("unset") maps to rayless's own "off" value. The
one default that must differ is listed in DIFFERENT with its reason (also in docs/config.md).

  defaults_match_trl.py RAYLESS DEFAULTS_JSON
"""
import json
import subprocess
import sys
import tempfile
import tomllib

# rayless key -> (GRPOConfig field, rayless value standing for TRL's None)
SHARED = {
    "grpo.num_generations": ("num_generations", None),
    "generation.max_completion_length": ("max_completion_length", None),
    "generation.temperature": ("temperature", None),
    "generation.top_p": ("top_p", None),
    "generation.top_k": ("top_k", None),
    "generation.min_p": ("min_p", 0.0),
    "generation.repetition_penalty": ("repetition_penalty", None),
    "grpo.beta": ("beta", None),
    "grpo.num_iterations": ("num_iterations", None),
    "grpo.epsilon": ("epsilon", None),
    "grpo.epsilon_high": ("epsilon_high", 0.0),
    "grpo.delta": ("delta", 0.0),
    "grpo.loss_type": ("loss_type", None),
    "grpo.scale_rewards": ("scale_rewards", None),
    "grpo.multi_objective_aggregation": ("multi_objective_aggregation", None),
    "grpo.importance_sampling_level": ("importance_sampling_level", None),
    "grpo.top_entropy_quantile": ("top_entropy_quantile", None),
    "grpo.mask_truncated_completions": ("mask_truncated_completions", None),
    "grpo.use_bias_correction_kl": ("use_bias_correction_kl", None),
    "grpo.sapo_temperature_pos": ("sapo_temperature_pos", None),
    "grpo.sapo_temperature_neg": ("sapo_temperature_neg", None),
    "grpo.sync_ref_model": ("sync_ref_model", None),
    "grpo.ref_model_mixup_alpha": ("ref_model_mixup_alpha", None),
    "grpo.ref_model_sync_steps": ("ref_model_sync_steps", None),
    "grpo.steps_per_generation": ("steps_per_generation", 0),
    "grpo.generation_batch_size": ("generation_batch_size", 0),
    "reward.reward_weights": ("reward_weights", []),
    "data.shuffle": ("shuffle_dataset", None),
    "optim.learning_rate": ("learning_rate", None),
    "optim.adam_beta1": ("adam_beta1", None),
    "optim.adam_beta2": ("adam_beta2", None),
    "optim.adam_epsilon": ("adam_epsilon", None),
    "optim.weight_decay": ("weight_decay", None),
    "optim.max_grad_norm": ("max_grad_norm", None),
    "optim.lr_scheduler_type": ("lr_scheduler_type", None),
    "optim.warmup_steps": ("warmup_steps", None),
    "train.seed": ("seed", None),
    "train.per_device_train_batch_size": ("per_device_train_batch_size", None),
    "train.gradient_accumulation_steps": ("gradient_accumulation_steps", None),
    "train.bf16": ("bf16", None),
    "train.gradient_checkpointing": ("gradient_checkpointing", None),
    "train.max_steps": ("max_steps", None),
    "checkpoint.save_steps": ("save_steps", None),
    "log.logging_steps": ("logging_steps", None),
    "grpo.vllm_importance_sampling_correction": ("vllm_importance_sampling_correction", None),
    "grpo.vllm_importance_sampling_mode": ("vllm_importance_sampling_mode", None),
    "grpo.vllm_importance_sampling_clip_max": ("vllm_importance_sampling_clip_max", 0.0),
    "grpo.vllm_importance_sampling_clip_min": ("vllm_importance_sampling_clip_min", 0.0),
    "grpo.off_policy_mask_threshold": ("off_policy_mask_threshold", 0.0),
}
# Defaults that differ on purpose (docs/config.md, "Defaults and TRL").
DIFFERENT = {
    "train.max_steps": "TRL's -1 trains num_train_epochs = 3 epochs; rayless counts optimizer steps only",
}


def main():
    rayless, defaults_path = sys.argv[1], sys.argv[2]
    trl = json.load(open(defaults_path))["defaults"]
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as empty:
        shown = subprocess.run([rayless, "config", "show", empty.name], check=True, capture_output=True, text=True).stdout
    ours = tomllib.loads(shown)
    failures = []
    for key, (trl_key, none_means) in SHARED.items():
        section, name = key.split(".")
        got = ours[section][name]
        want = trl[trl_key]
        if want is None:
            want = none_means
        same = got == want if not isinstance(want, float) else abs(got - want) <= 1e-12 * max(1.0, abs(want))
        if key in DIFFERENT:
            print(f"differs on purpose: {key} = {got!r}, GRPOConfig.{trl_key} = {trl[trl_key]!r} ({DIFFERENT[key]})")
            continue
        if not same:
            failures.append(f"{key} = {got!r}, but GRPOConfig.{trl_key} defaults to {trl[trl_key]!r}")
    print(f"{len(SHARED) - len(DIFFERENT)} shared defaults compared with TRL {json.load(open(defaults_path))['trl_version']}")
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
