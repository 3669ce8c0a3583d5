#!/usr/bin/env python3
"""A LoRA adapter rayless trained loads in PEFT, and rayless's merge is PEFT's merge.

Runs in .venv-tools (tools/setup_tools_venv.sh installs torch, transformers and PEFT there); exits 77
(skipped) when PEFT is not installed. Steps:
  1. rayless-bench init-model: a seeded base model directory transformers can load;
  2. rayless train (LoRA on every linear layer, 2 steps): the checkpoint is the adapter;
  3. rayless export --merge: the adapter folded into the base;
  4. PEFT: PeftModel.from_pretrained(base, checkpoint) gives the logits transformers gives for the
     merged directory (float32, 1e-5), and PEFT's merge_and_unload gives rayless's merged weights
     (1e-6); with the adapter disabled, PEFT gives the base's logits;
  5. rayless generate --adapter (greedy) writes what rayless generate on the merged model writes.
usage: lora_peft_roundtrip.py RAYLESS RAYLESS_BENCH"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import peft
    import torch
    import transformers
except ImportError as e:
    print(f"SKIP: {e} (run tools/setup_tools_venv.sh)")
    sys.exit(77)

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run(*args):
    out = subprocess.run(args, cwd=SRC, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout, out.stderr)
        raise SystemExit(f"FAIL: {' '.join(args)} exited {out.returncode}")
    return out.stdout


def main():
    rayless, bench = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="rayless-peft-")
    base = os.path.join(work, "base")
    run(bench, "init-model", "--config-json", "configs/models/tiny/config.json", "--out", base)
    run(rayless, "train", "--config", "configs/ci-small.toml", "--output", os.path.join(work, "run"),
        "--set", f"model.path={base}", "--set", "lora.enabled=true", "--set", "lora.r=4", "--set", "lora.alpha=8",
        "--set", 'lora.target_modules=["all-linear"]', "--set", "optim.learning_rate=1e-2",
        "--set", "train.max_steps=2", "--set", "checkpoint.save_steps=0")
    run_dir = os.path.join(work, "run", "checkpoints")
    adapter = os.path.join(run_dir, open(os.path.join(run_dir, "latest")).read().strip())
    merged = os.path.join(work, "merged")
    run(rayless, "export", "--merge", "--adapter", adapter, "--output", merged)

    ids = torch.tensor([[5, 80, 71, 33, 101, 12, 99, 7]])
    base_model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        base_logits = base_model(input_ids=ids).logits
    model = peft.PeftModel.from_pretrained(base_model, adapter)
    model.eval()
    with torch.no_grad():
        peft_logits = model(input_ids=ids).logits
        with model.disable_adapter():
            off_logits = model(input_ids=ids).logits
        merged_model = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
        merged_logits = merged_model(input_ids=ids).logits
        peft_merged = model.merge_and_unload().state_dict()
    checks = []
    moved = (peft_logits - base_logits).abs().max().item()
    checks.append(("the trained adapter changes PEFT's logits", moved > 1e-4, f"{moved:.3e}"))
    d = (peft_logits - merged_logits).abs().max().item()
    checks.append(("PEFT with rayless's adapter = transformers on rayless's merge (1e-5)", d < 1e-5, f"{d:.3e}"))
    d = (off_logits - base_logits).abs().max().item()
    checks.append(("PEFT with the adapter disabled = the base", d == 0.0, f"{d:.3e}"))
    merged_state = merged_model.state_dict()
    worst = max((merged_state[k] - v).abs().max().item() for k, v in peft_merged.items() if k in merged_state)
    checks.append(("PEFT's merge_and_unload = rayless export --merge (1e-6)", worst < 1e-6, f"{worst:.3e}"))
    gen = lambda *extra: json.loads(run(rayless, "generate", "--prompt", "Tell me", "--greedy", "--json",
                                        "--max-new-tokens", "12", *extra))["completion_ids"]
    a, b = gen("--model", base, "--adapter", adapter), gen("--model", merged)
    checks.append(("rayless generate --adapter = rayless generate on the merged model", a == b, str(a)))
    ok = True
    for what, passed, figure in checks:
        print(f"{'PASS' if passed else 'FAIL'}: {what}: {figure}")
        ok = ok and passed
    print(f"(peft {peft.__version__}, transformers {transformers.__version__}, torch {torch.__version__})")
    if ok:
        shutil.rmtree(work)  # kept on failure, to look at
    else:
        print(f"files kept in {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
