#!/usr/bin/env python3
"""Golden fixtures for LoRA, made with PEFT itself.

Writes tests/data/lora-golden/: two adapters PEFT saved for the tiny random Qwen2 model of
tests/data/hf-golden/qwen2 (loaded in float64), and what PEFT computes with them: logits of a
left-padded batch with the adapter on, with it disabled (the base model), and after
merge_and_unload. The C++ tests (tests/hf/test_lora.cpp) load the same base and adapters and
compare.
  adapter-qvd:  r = 4, lora_alpha = 8, target_modules = [q_proj, v_proj, down_proj]
  adapter-all:  r = 2, lora_alpha = 4, target_modules = "all-linear", use_rslora = true
Both with init_lora_weights = False (B random too, so the adapters change the output).

Not needed by CI (the fixtures are committed). To regenerate:
    ./tools/setup_tools_venv.sh        # .venv-tools with torch, transformers, peft
    .venv-tools/bin/python tools/make_lora_golden.py
"""
import json
import os
import shutil

import peft
import torch
import transformers
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "..", "tests", "data", "hf-golden", "qwen2")
OUT = os.path.join(HERE, "..", "tests", "data", "lora-golden")

ADAPTERS = {
    "adapter-qvd": dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]),
    "adapter-all": dict(r=2, lora_alpha=4, target_modules="all-linear", use_rslora=True),
}


def main():
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    vocab = json.load(open(os.path.join(BASE, "config.json")))["vocab_size"]
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, vocab, (2, 9), generator=g)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0  # left padding
    input_ids[1, :3] = 0
    expected = {"input_ids": input_ids, "attention_mask": attention_mask}
    for name, kwargs in ADAPTERS.items():
        base = transformers.AutoModelForCausalLM.from_pretrained(BASE, dtype=torch.float64)
        config = peft.LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, init_lora_weights=False, **kwargs)
        model = peft.get_peft_model(base, config)
        model.eval()
        directory = os.path.join(OUT, name)
        shutil.rmtree(directory, ignore_errors=True)
        model.save_pretrained(directory)
        os.remove(os.path.join(directory, "README.md"))  # PEFT's generated model card: not a fixture
        with torch.no_grad():
            expected[f"{name}.logits"] = model(input_ids=input_ids, attention_mask=attention_mask).logits
            with model.disable_adapter():
                expected[f"{name}.base_logits"] = model(input_ids=input_ids, attention_mask=attention_mask).logits
            merged = model.merge_and_unload()
            expected[f"{name}.merged_logits"] = merged(input_ids=input_ids, attention_mask=attention_mask).logits
            expected[f"{name}.merged_q_proj0"] = merged.model.layers[0].self_attn.q_proj.weight.detach().clone()
        # the config PEFT wrote names the base by the absolute path it was given: keep it relative
        cfg_path = os.path.join(directory, "adapter_config.json")
        cfg = json.load(open(cfg_path))
        cfg["base_model_name_or_path"] = "tests/data/hf-golden/qwen2"
        json.dump(cfg, open(cfg_path, "w"), indent=2, sort_keys=True)
    # ids as float64: rayless's safetensors reader takes floating-point tensors only
    expected["input_ids"] = expected["input_ids"].double()
    expected["attention_mask"] = expected["attention_mask"].double()
    save_file({k: v.contiguous() for k, v in expected.items()}, os.path.join(OUT, "expected.safetensors"))
    json.dump({"peft": peft.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
               "adapters": {k: {kk: vv for kk, vv in v.items()} for k, v in ADAPTERS.items()}},
              open(os.path.join(OUT, "versions.json"), "w"), indent=2)
    print("wrote", OUT, "peft", peft.__version__)


if __name__ == "__main__":
    main()
