#!/usr/bin/env python3
"""Experiment (docs/notes/bench-xeon.md, "Training's backward: attention in float32, ..."): LibTorch's
CPU flash attention kernel, forward and backward, on bfloat16 operands against its backward on float32
copies of them (the casts timed with it), one thread, at the shapes of the 53M model's training buckets
(10 query heads, 2 kv heads, head size 64; L queries of a bucket after a 30-token prompt).

    .venv/bin/python tools/bench/experiments/attention_backward.py
"""
import time

import torch

flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def best_ms(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    heads, kv_heads, head_size, past = 10, 2, 64, 30
    print("rows  L    S   | forward | backward bf16 | backward float32 (casts included) | ratio")
    for rows, length in [(3, 40), (3, 100), (3, 200), (16, 100), (1, 250)]:
        keys = past + length
        bf16 = torch.bfloat16
        q = torch.randn(rows, length, heads, head_size).to(bf16).transpose(1, 2)
        k = torch.randn(rows, kv_heads, keys, head_size).to(bf16)
        v = torch.randn(rows, kv_heads, keys, head_size).to(bf16)
        mask = torch.zeros(rows, 1, length, keys, dtype=bf16)
        grad = torch.randn(rows, heads, length, head_size).to(bf16)
        out, logsumexp = flash(q, k, v, 0.0, False, attn_mask=mask, scale=0.125)
        wide = lambda t: t.float()
        forward = best_ms(lambda: flash(q, k, v, 0.0, False, attn_mask=mask, scale=0.125))
        low = best_ms(lambda: flash_backward(grad, q, k, v, out, logsumexp, 0.0, False, attn_mask=mask, scale=0.125))
        high = best_ms(lambda: flash_backward(wide(grad), wide(q), wide(k), wide(v), wide(out), logsumexp, 0.0, False,
                                              attn_mask=wide(mask), scale=0.125))
        print(f"{rows:4d} {length:4d} {keys:4d} | {forward:7.2f} | {low:13.2f} | {high:33.2f} | {low / high:4.1f}x")


if __name__ == "__main__":
    main()
