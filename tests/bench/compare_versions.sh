#!/usr/bin/env bash
# tools/bench/compare.py records `rayless version` in results.json: every line under its own name, the
# kernel plan's lines ("kernel attention.decode ...", "kernel rms_norm.decode ...") included.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rayless=$1
"$rayless" version > version.txt
python3 - "$root/tools/bench" version.txt <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import compare

lines = open(sys.argv[2]).read().splitlines()
fields = compare.rayless_version_fields("\n".join(lines))
assert len(fields) == len(lines), (len(fields), len(lines), fields)
for line in lines:  # each line is its name, a space, its value
    assert any(line == f"{name} {value}" for name, value in fields.items()), line
for name in ("kernel generation_linear.float32", "kernel generation_linear.bfloat16", "kernel attention.decode",
             "kernel rms_norm.decode", "kernel silu_times.decode", "onednn kernel cache", "rayless"):
    assert name in fields, name
print("rayless_version_fields: all", len(lines), "lines kept under their own names")
PY
