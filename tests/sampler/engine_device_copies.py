#!/usr/bin/env python3
"""The generation engine's copies between host and device do not stall a GPU (issue 47, item 3).

A copy from pageable host memory to a GPU waits until the device has run everything queued before it,
and a read to the host waits too. The engine's host-to-device copies go through Engine::to_device
(pinned memory, asynchronous); its reads to the host happen in two places only: a look's copy
(start_look, asynchronous into pinned memory on a GPU) and the results at the end (assemble).

usage: engine_device_copies.py SOURCE_DIR
Seen failing on the engine before to_device (11 copies to the device from pageable memory).
"""
import re
import sys
from pathlib import Path

ENGINE = "src/sampler/generation_engine.cpp"
TO_DEVICE = re.compile(r"\.to\(\s*device_\s*[,)]")
TO_HOST = re.compile(r"\.item<|\.cpu\(\)|kCPU\)|\.tolist\(")
# functions (by their signature's start) where a read to the host is the design
HOST_READS_ALLOWED = ("Look start_look(", "GenerationOutput assemble(")
COPY_ALLOWED = ("torch::Tensor to_device(const torch::Tensor& host)",)


def function_spans(lines, starts):
    """Line index ranges of the functions whose signature line contains one of `starts`."""
    spans = []
    for i, line in enumerate(lines):
        if any(s in line for s in starts):
            depth, opened = 0, False
            for j in range(i, len(lines)):
                depth += lines[j].count("{") - lines[j].count("}")
                opened = opened or "{" in lines[j]
                if opened and depth <= 0:
                    spans.append((i, j))
                    break
    return spans


def main():
    root = Path(sys.argv[1])
    lines = (root / ENGINE).read_text().splitlines()
    inside = lambda spans, i: any(a <= i <= b for a, b in spans)
    reads, copies = function_spans(lines, HOST_READS_ALLOWED), function_spans(lines, COPY_ALLOWED)
    if len(reads) != len(HOST_READS_ALLOWED) or len(copies) != len(COPY_ALLOWED):
        print(f"FAIL: {ENGINE}: expected the functions {HOST_READS_ALLOWED + COPY_ALLOWED}")
        return 1
    problems = []
    for i, line in enumerate(lines):
        code = line.split("//")[0]
        if TO_DEVICE.search(code) and not inside(copies, i):
            problems.append(f"{ENGINE}:{i + 1}: a copy to the device from pageable memory (use to_device): {line.strip()}")
        if TO_HOST.search(code) and not inside(reads, i) and not inside(copies, i):
            problems.append(f"{ENGINE}:{i + 1}: a read to the host outside a look or assemble: {line.strip()}")
    for p in problems:
        print("FAIL:", p)
    print(f"engine device copies: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
