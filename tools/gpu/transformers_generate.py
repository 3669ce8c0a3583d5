#!/usr/bin/env python3
"""transformers' generate with a static cache, the baseline of tools/gpu/generation_bench.sh: the same
model shape (random weights), dtype, device, rows and tokens as rayless-bench generation, prompts of the
same lengths; min_new_tokens = max_new_tokens so every row generates every token (no EOS), sampling at
temperature 1. Times one run after a warm-up and writes tokens/s and ms per decode step to --json.

  transformers_generate.py --model-json FILE --device cuda --dtype bfloat16 --rows 1,16 --tokens 256 --json OUT
"""
import argparse
import json
import time

import torch
import transformers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model-json", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--rows", default="1,16,64,256")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--json", required=True)
    a = p.parse_args()
    config_dict = json.load(open(a.model_json))
    config_dict.setdefault("vocab_size", 272)
    config = transformers.AutoConfig.for_model(**config_dict)
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(1)
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=dtype).to(a.device).eval()
    runs = []
    for rows in [int(r) for r in a.rows.split(",")]:
        # rayless-bench's prompts: lengths from half the longest to the longest, left-padded
        half = a.prompt_tokens // 2
        prompts = [[1 + (r * 31 + t * 7) % 200 for t in range(half + (r * 7) % (a.prompt_tokens - half + 1))]
                   for r in range(rows)]
        width = max(len(x) for x in prompts)
        ids = torch.tensor([[0] * (width - len(x)) + x for x in prompts], device=a.device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in prompts], device=a.device)
        kwargs = dict(attention_mask=mask, max_new_tokens=a.tokens, min_new_tokens=a.tokens, do_sample=True,
                      temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0, cache_implementation="static")
        with torch.inference_mode():
            model.generate(ids, **kwargs)  # warm-up
            if a.device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = model.generate(ids, **kwargs)
            if a.device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
        generated = (out.shape[1] - width) * rows
        runs.append({"rows": rows, "tokens": generated, "seconds": seconds, "tokens_per_s": generated / seconds,
                     "ms_per_decode_step": 1e3 * seconds / max(1, out.shape[1] - width)})
        print(f"transformers generate (static cache): {rows} rows: {generated / seconds:.0f} tokens/s, "
              f"{1e3 * seconds / max(1, out.shape[1] - width):.2f} ms per step")
    json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "model_json": a.model_json,
               "device": a.device, "dtype": a.dtype, "runs": runs}, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
