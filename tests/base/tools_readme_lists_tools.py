#!/usr/bin/env python3
"""tools/README.md names every file in tools/: each file git tracks there matches a path of the table's
first column (a file, a glob such as `slurm/test_*.sh`, or a folder such as `bench/`), and each path
named matches a file, so the table neither misses a tool nor names one that has gone."""
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
readme = (root / "tools" / "README.md").read_text()
patterns = []
for line in readme.splitlines():
    cells = line.split("|")
    if len(cells) > 2 and "`" in cells[1]:
        # paths only (a name such as `rayless-bench` beside a path is what it builds)
        patterns += [p for p in re.findall(r"`([^`\s]+)`", cells[1]) if "/" in p or "." in p]
files = subprocess.run(["git", "ls-files", "tools"], cwd=root, capture_output=True, text=True,
                       check=True).stdout.split()
files = [f[len("tools/"):] for f in files if f != "tools/README.md"]


def matches(pattern, path):
    return path.startswith(pattern) if pattern.endswith("/") else fnmatch.fnmatch(path, pattern)


errors = [f"tools/{f} has no row in tools/README.md" for f in files if not any(matches(p, f) for p in patterns)]
errors += [f"tools/README.md names `{p}`, which matches no file in tools/" for p in patterns
           if not any(matches(p, f) for f in files)]
for e in errors:
    print("FAIL:", e)
if errors:
    sys.exit(1)
print(f"PASS: tools/README.md covers all {len(files)} files of tools/ with {len(patterns)} paths")
