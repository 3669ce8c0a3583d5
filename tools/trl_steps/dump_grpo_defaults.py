#!/usr/bin/env python3
"""Writes TRL's GRPOConfig() defaults as JSON, for the test that `rayless config show` on an empty
config agrees with them (tests/base/defaults_match_trl.py). Run in the TRL venv
(tools/trl_steps/setup_venv.sh):

  .venv-trl/bin/python tools/trl_steps/dump_grpo_defaults.py > tests/data/grpo_config_defaults.json
"""
import dataclasses
import enum
import json
import sys

import transformers
import trl

KEYS = [
    "num_generations", "max_completion_length", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "beta", "num_iterations", "epsilon", "epsilon_high", "delta", "loss_type", "scale_rewards",
    "multi_objective_aggregation", "importance_sampling_level", "top_entropy_quantile",
    "mask_truncated_completions", "use_bias_correction_kl", "sapo_temperature_pos", "sapo_temperature_neg", "sync_ref_model",
    "ref_model_mixup_alpha", "ref_model_sync_steps", "reward_weights", "shuffle_dataset",
    "learning_rate", "adam_beta1", "adam_beta2", "adam_epsilon", "weight_decay", "max_grad_norm",
    "lr_scheduler_type", "warmup_steps", "warmup_ratio", "seed", "per_device_train_batch_size",
    "gradient_accumulation_steps", "bf16", "gradient_checkpointing", "max_steps", "save_steps", "logging_steps",
    "vllm_importance_sampling_correction", "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min", "off_policy_mask_threshold",
]


def plain(value):
    return value.value if isinstance(value, enum.Enum) else value


def main():
    # the declared defaults (GRPOConfig() itself refuses bf16 on a machine without a GPU); TRL's
    # __post_init__ turns bf16 = None into "not fp16", i.e. True
    fields = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}
    defaults = {}
    for key in KEYS + ["steps_per_generation", "generation_batch_size"]:
        f = fields.get(key)
        if f is None:  # not an option of this version (transformers 5 dropped warmup_ratio)
            continue
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        defaults[key] = plain(value)
    if defaults["bf16"] is None:
        defaults["bf16"] = not defaults.get("fp16", False)
    json.dump({"trl_version": trl.__version__, "transformers_version": transformers.__version__,
               "defaults": defaults}, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
