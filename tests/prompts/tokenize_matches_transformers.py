#!/usr/bin/env python3
"""`rayless tokenize` against transformers: every case of tests/data/chat-models/cases.json (made by
tools/make_tokenize_golden.py with transformers' apply_chat_template and tokenizer(text)) must give the
same text byte for byte and the same ids; every error case must exit 2 with one line matching it.

usage: tokenize_matches_transformers.py RAYLESS_BINARY CHAT_MODELS_DIR
"""
import json
import re
import subprocess
import sys


def main():
    binary, root = sys.argv[1], sys.argv[2]
    with open(f"{root}/cases.json", encoding="utf-8") as f:
        fixture = json.load(f)
    failures = 0
    for case in fixture["cases"]:
        cmd = [binary, "tokenize", "--model", case["dir"], "--json"] + case["args"]
        run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"FAIL ({run.returncode}) {' '.join(cmd)}: {run.stderr.strip()}")
            failures += 1
            continue
        got = json.loads(run.stdout)
        if got["text"] != case["text"] or got["ids"] != case["ids"]:
            print(f"FAIL {case['dir']} {case['args']} ({case['kind']}):\n  want text {case['text']!r}\n  got  text "
                  f"{got['text']!r}\n  want ids {case['ids']}\n  got  ids {got['ids']}")
            failures += 1
    for case in fixture["errors"]:
        cmd = [binary, "tokenize", "--model", case["dir"], "--json"] + case["args"]
        run = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        lines = run.stderr.strip().splitlines()
        ok = run.returncode == 2 and len(lines) == 1 and re.search(case["error"], lines[0])
        if not ok:
            print(f"FAIL error case {case['args']}: rc {run.returncode}, stderr {run.stderr.strip()!r}, "
                  f"want one line matching {case['error']!r}")
            failures += 1
    total = len(fixture["cases"]) + len(fixture["errors"])
    print(f"{total - failures} of {total} cases identical to transformers {fixture['versions']['transformers']}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
