#!/usr/bin/env bash
# tools/gpu/check_wheels.py on made-up wheels: a requirement met by another wheel (under another
# spelling of its name) or by the GPU machine passes, one for an extra is left out, and one met by
# neither fails with exit 1 naming the wheel and the requirement.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 - "$scratch" <<'PY'
import os, sys, zipfile
def wheel(name, requires):
    path = os.path.join(sys.argv[1], f"{name}-1.0-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: " + name + "\n" + "".join(f"Requires-Dist: {r}\n" for r in requires))
wheel("trl", ["accelerate>=1.10.1", "datasets>=4.7.0", "rich; extra == 'quality'"])
wheel("datasets", ["dill<0.4.2,>=0.3.0", "Huggingface_Hub<3.0,>=1.31.0", "pyarrow>=24.0.0"])
wheel("dill", [])
PY
check() { python3 "$root/tools/gpu/check_wheels.py" "$scratch" "accelerate huggingface-hub pyarrow"; }
check
echo 'a wheel whose need is met by neither:'
python3 - "$scratch" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(os.path.join(sys.argv[1], "multiprocess-0.70.19-py312-none-any.whl"), "w") as z:
    z.writestr("multiprocess-0.70.19.dist-info/METADATA", "Name: multiprocess\nRequires-Dist: objgraph>=1.7\n")
PY
rc=0
out=$(check 2>&1) || rc=$?
echo "$out"
[ $rc -eq 1 ] || { echo "FAIL: exit $rc, expected 1"; exit 1; }
grep -q "multiprocess-0.70.19-py312-none-any.whl needs objgraph>=1.7" <<< "$out" || { echo "FAIL: not named"; exit 1; }
echo "check_wheels.py: met requirements pass, an unmet one fails naming it"
