#!/usr/bin/env python3
"""Experiment (docs/notes/bench-xeon.md, "Transposed weight gradients, ..."): a projection's weight gradient
grad.t().mm(input) in bfloat16 on one thread, as autograd computes it (a transposed operand) and with
the gradient transposed into memory first (row-major), at the 53M model's projection shapes; and
LibTorch's own transpose copy, which rayless replaces (include/rayless/model/transpose.h).

    .venv/bin/python tools/bench/experiments/weight_gradient_products.py [TOKENS]
"""
import sys

import torch

from attention_backward import best_ms  # this directory's timing helper


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 1474
    print(f"{tokens} tokens | out x in | grad.t().mm(x) ms | row-major gT.mm(x) ms (GFLOP/s) | LibTorch transpose of grad ms")
    for out, inp in [(640, 640), (128, 640), (1792, 640), (640, 1792)]:
        x = torch.randn(tokens, inp).to(torch.bfloat16)
        grad = torch.randn(tokens, out).to(torch.bfloat16)
        grad_t = grad.t().contiguous()
        flops = 2 * tokens * out * inp
        transposed_operand = best_ms(lambda: grad.t().mm(x))
        row_major = best_ms(lambda: grad_t.mm(x))
        copy = best_ms(lambda: grad.t().contiguous())
        print(f"{out:5d} x {inp:4d} | {transposed_operand:8.2f} | {row_major:8.2f} ({flops / row_major / 1e6:5.0f}) | {copy:6.2f}")


if __name__ == "__main__":
    main()
