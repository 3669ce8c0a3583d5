#!/usr/bin/env python3
"""Logits of the committed golden models (tests/data/hf-golden/{qwen2,llama,qwen3}) under bfloat16
autocast, as TRL's bf16 = True runs its forward passes and generation on a CPU: float32 weights, torch's
CPU autocast to bfloat16, transformers' default (sdpa) attention.

Writes tests/data/hf-golden/autocast-bf16-expected.safetensors: one [B, T, V] float32 tensor per model,
for the left-padded batch in <name>-expected.json, with positions counted from the mask (what
generation uses). The test "golden: logits under bfloat16 autocast match transformers" compares
rayless's full forward and its KV-cached, fused-weight decode against it.

    .venv-trl/bin/python tools/make_autocast_golden.py     # or any venv with transformers and torch
"""
import json
import os

import torch
import transformers
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-golden")


def main():
    torch.set_num_threads(1)
    tensors = {}
    for name in ["qwen2", "llama", "qwen3"]:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            os.path.join(ROOT, name), dtype=torch.float32, attn_implementation="sdpa").eval()
        with open(os.path.join(ROOT, f"{name}-expected.json")) as f:
            batch = json.load(f)
        ids, mask = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"])
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        tensors[name] = logits.float().contiguous()
        print(f"{name}: logits {tuple(logits.shape)} computed in {logits.dtype}")
    save_file(tensors, os.path.join(ROOT, "autocast-bf16-expected.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
