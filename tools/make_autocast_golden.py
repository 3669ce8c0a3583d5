#!/usr/bin/env python3
"""Logits of the committed golden models (tests/data/hf-golden/{qwen2,llama,qwen3}) under bfloat16
autocast, as TRL's bf16 = True runs its forward passes and generation on a CPU: float32 weights, torch's
CPU autocast to bfloat16, transformers' default (sdpa) attention.

Writes tests/data/hf-golden/autocast-bf16-expected.safetensors: one [B, T, V] float32 tensor per model,
for the left-padded batch in <name>-expected.json, with positions counted from the mask (what
generation uses). The test "golden: logits under bfloat16 autocast match transformers" compares
rayless's full forward and its KV-cached, fused-weight decode against it.

Also writes tests/data/hf-golden/autocast-bf16-grads.safetensors: the gradients of every parameter of
the sum of the completion tokens' log-probs (each row's first 3 real tokens are its prompt, the rest its
completion, as in the test "golden: the packed training pass under bfloat16 autocast ..."), once under
bfloat16 autocast as TRL's backward computes them ("<model>/autocast/<parameter>") and once with the
model in float64 ("<model>/float64/<parameter>", the exact gradients to compare both against). The test
"golden: gradients of the packed training pass under bfloat16 autocast ..." uses them.

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
    tensors, grads = {}, {}
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
        for mode in ["autocast", "float64"]:
            for parameter, grad in completion_logprob_grads(name, ids, mask, positions, mode).items():
                grads[f"{name}/{mode}/{parameter}"] = grad
    metadata = {"transformers": transformers.__version__, "torch": torch.__version__}
    save_file(tensors, os.path.join(ROOT, "autocast-bf16-expected.safetensors"), metadata=metadata)
    save_file(grads, os.path.join(ROOT, "autocast-bf16-grads.safetensors"), metadata=metadata)


def completion_logprob_grads(name, ids, mask, positions, mode, prompt_tokens=3):
    """Gradients of the summed log-probs of each row's tokens after its first prompt_tokens real ones."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.join(ROOT, name), dtype=torch.float32, attn_implementation="sdpa")
    if mode == "float64":
        model = model.double()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "autocast"):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    logps = torch.log_softmax(logits.float() if mode == "autocast" else logits, -1)
    scored = logps[:, :-1].gather(-1, ids[:, 1:, None])[..., 0]  # the logits at t - 1 score token t
    first_real = (mask == 0).sum(-1, keepdim=True)  # rows are left-padded
    in_completion = torch.arange(1, ids.shape[1])[None, :] >= first_real + prompt_tokens
    (scored * in_completion).sum().backward()
    named = dict(model.named_parameters())
    grads = {}
    for parameter, value in named.items():
        if value.grad is not None:
            grads[parameter] = value.grad.float().contiguous()
    # a tied LM head is the embedding: its gradient is the sum of both uses, under the embedding's name
    print(f"{name} {mode}: gradients of {len(grads)} parameters")
    return grads


if __name__ == "__main__":
    main()
