#!/usr/bin/env python3
"""Compare the tensors of two safetensors files: prints the largest difference relative to the
largest magnitude of each tensor, and exits 1 when it exceeds --tolerance (or the names, shapes or
dtypes differ). Reads the format directly (8-byte header length, JSON header, raw data) with numpy.
With --absolute, the largest absolute difference must stay within it instead (float32 runs: see
docs/distributed.md).
usage: compare_weights.py A.safetensors B.safetensors [--tolerance 1e-12 | --absolute 1e-6] [--label text]"""
import argparse
import json
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":  # widen bf16 to float32 by shifting into the high half
            raw = np.frombuffer(data[begin:end], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(info["shape"])
        else:
            out[name] = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = (info["dtype"], out[name])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tolerance", type=float, default=1e-12)
    ap.add_argument("--absolute", type=float, default=None)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    a, b = read(args.a), read(args.b)
    if sorted(a) != sorted(b):
        print(f"FAIL{args.label}: tensor names differ: {sorted(set(a) ^ set(b))}")
        return 1
    worst, worst_name, worst_abs, worst_abs_name = 0.0, "", 0.0, ""
    for name in sorted(a):
        (da, ta), (db, tb) = a[name], b[name]
        if da != db or ta.shape != tb.shape:
            print(f"FAIL{args.label}: {name}: {da}{list(ta.shape)} vs {db}{list(tb.shape)}")
            return 1
        ta, tb = ta.astype(np.float64), tb.astype(np.float64)
        scale = max(np.abs(ta).max(initial=0.0), np.abs(tb).max(initial=0.0), 1e-30)
        absolute = float(np.abs(ta - tb).max(initial=0.0))
        rel = absolute / scale
        if absolute > worst_abs:
            worst_abs, worst_abs_name = absolute, name
        if rel > worst:
            worst, worst_name = rel, name
    if args.absolute is None:
        verdict = "PASS" if worst <= args.tolerance else "FAIL"
        limit = f"tolerance {args.tolerance:g} relative"
    else:
        verdict = "PASS" if worst_abs <= args.absolute else "FAIL"
        limit = f"tolerance {args.absolute:g} absolute"
    print(f"{verdict}{args.label}: {len(a)} tensors, largest relative difference {worst:.3e}"
          f"{' (' + worst_name + ')' if worst_name else ''}, largest absolute {worst_abs:.3e}"
          f"{' (' + worst_abs_name + ')' if worst_abs_name else ''}, {limit}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
