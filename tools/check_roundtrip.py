#!/usr/bin/env python3
"""Checks that a model directory written by rayless (save_hf_directory) loads in transformers and
gives the logits rayless computed.

The C++ test "model: save_hf_directory round trip, ..." writes
  <build>/test-scratch/model/save-roundtrip/saved/                 (the HF directory)
  <build>/test-scratch/model/save-roundtrip/saved-logits.safetensors (rayless' input ids and logits)
Run it, then (in the dev venv described in tools/make_hf_golden.py):
    .venv-golden/bin/python tools/check_roundtrip.py [--build build]
Exits 1 when the logits differ by more than 1e-4 or the tokenizer disagrees.
"""
import argparse
import os
import sys

import torch
import transformers
from safetensors.torch import load_file


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build", help="build directory the tests ran in")
    args = parser.parse_args()
    base = os.path.join(args.build, "test-scratch", "model", "save-roundtrip")
    model_dir = os.path.join(base, "saved")
    expected = load_file(os.path.join(base, "saved-logits.safetensors"))
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = expected["input_ids"].long()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    error = (logits - expected["logits"]).abs().max().item()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    text = "Hi! naïve 😀 <|im_end|>"
    ids_hf = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids_bytes = list("Hi! naïve 😀 ".encode()) + [260]
    print(f"transformers {transformers.__version__}: {type(model).__name__} from {model_dir}")
    print(f"logits max abs error vs rayless: {error:.3e} over {tuple(logits.shape)}")
    print(f"tokenizer ids equal to rayless' byte tokenizer: {ids_hf == ids_bytes}")
    ok = error <= 1e-4 and ids_hf == ids_bytes
    print("roundtrip: ok" if ok else "roundtrip: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
