#!/usr/bin/env python3
"""Every row of docs/hpc.md's signal table names ctest tests that check it, and every check names a row.

A row is `| `ROW` | you send | to | what happens | checkpoint | ends | `test`, `test` |` between the
markers <!-- signal table --> and <!-- end of signal table -->. A test checks a row when a script it
runs (its command, or a tools/ script that command runs) calls `signal_table_check ROW ...`
(tools/signal_table.sh), which compares the row's checkpoint and ends cells with what the test saw.

usage: signal_table_tests.py CTEST BUILD_DIR SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys


def table_rows(doc):
    text = open(doc).read()
    start, end = text.find("<!-- signal table -->"), text.find("<!-- end of signal table -->")
    if start < 0 or end < start:
        sys.exit(f"FAIL: {doc} has no <!-- signal table --> ... <!-- end of signal table --> block")
    rows = {}
    for line in text[start:end].splitlines():
        m = re.match(r"\| `([a-z0-9-]+)` \|", line)
        if not m:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7:
            sys.exit(f"FAIL: row `{m.group(1)}` has {len(cells)} cells, expected 7: {line}")
        rows[m.group(1)] = re.findall(r"`([^`]+)`", cells[6])
    if not rows:
        sys.exit("FAIL: the signal table has no rows")
    return rows


def scripts_of(command, source_dir):
    """The script files a test runs: its arguments that are files, and tools/ scripts those name."""
    found, queue = [], [a for a in command if a.endswith(".sh")]
    while queue:
        path = queue.pop()
        if path in found or not os.path.isfile(path):
            continue
        found.append(path)
        for name in re.findall(r"tools/slurm/[a-z_]+\.sh", open(path, errors="replace").read()):
            queue.append(os.path.join(source_dir, name))
    return found


def main():
    ctest, build_dir, source_dir = sys.argv[1:4]
    rows = table_rows(os.path.join(source_dir, "docs", "hpc.md"))
    listing = json.loads(subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, check=True,
                                        capture_output=True, text=True).stdout)
    commands = {t["name"]: t.get("command", []) for t in listing["tests"]}
    failures = []
    for row, tests in rows.items():
        if not tests:
            failures.append(f"row `{row}` names no test")
        for test in tests:
            if test not in commands:
                failures.append(f"row `{row}` names `{test}`, which is not a ctest test")
                continue
            checked = any(re.search(rf"signal_table_check {re.escape(row)}\b", open(s, errors="replace").read())
                          for s in scripts_of(commands[test], source_dir))
            if not checked:
                failures.append(f"row `{row}`: test `{test}` never calls signal_table_check {row}")
    # the other way: every check in the scripts names a row
    for top in ("tools", "tests"):
        for folder, _, files in os.walk(os.path.join(source_dir, top)):
            for name in files:
                if not name.endswith(".sh"):
                    continue
                path = os.path.join(folder, name)
                code = "\n".join(line for line in open(path, errors="replace") if not line.lstrip().startswith("#"))
                for row in re.findall(r"signal_table_check ([a-z0-9-]+)", code):
                    if row not in rows:
                        failures.append(f"{os.path.relpath(path, source_dir)} checks row `{row}`, which docs/hpc.md's table lacks")
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        sys.exit(1)
    print(f"PASS: {len(rows)} rows, each checked by the tests it names: " + ", ".join(rows))


if __name__ == "__main__":
    main()
