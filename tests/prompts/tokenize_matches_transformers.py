#!/usr/bin/env python3
"""`rayless tokenize` against transformers: every case of tests/data/chat-models/cases.json (made by
tools/make_tokenize_golden.py with transformers' apply_chat_template and tokenizer(text)) must give the
same text byte for byte and the same ids; every error case must exit 2 with one line matching it.

With tests/data/tokenizer-classes (tools/make_tokenizer_class_golden.py): in every directory, every
plain text and conversation gives transformers' ids and text, `tokenizer_class` names the class
transformers loaded, and stderr carries one line naming that class exactly where the class changes
tokenizer.json (the fixture's tokenizer_json_agrees, computed from the tokenizers library's objects).

usage: tokenize_matches_transformers.py RAYLESS_BINARY FIXTURE_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor


def tokenize(binary, root, model, args):
    run = subprocess.run([binary, "tokenize", "--model", model, "--json"] + args, cwd=root, capture_output=True, text=True)
    return run, json.loads(run.stdout) if run.returncode == 0 else None


def check_classes(binary, root, fixture):
    """Each directory of tests/data/tokenizer-classes; returns (cases, failures)."""
    conversations = json.load(open(f"{root}/conversations.json", encoding="utf-8"))
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for i, conversation in enumerate(conversations):
            files.append(os.path.join(tmp, f"conversation-{i}.json"))
            with open(files[-1], "w", encoding="utf-8") as f:
                json.dump(conversation, f, ensure_ascii=False)
        jobs = []
        for d in fixture["directories"]:
            jobs += [(d, ["--text", t["text"]], t) for t in d["texts"]]
            jobs += [(d, ["--messages", files[i]], c) for i, c in enumerate(d["conversations"])]
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda job: tokenize(binary, root, job[0]["dir"], job[1]), jobs))
    failures = 0
    for (d, args, want), (run, got) in zip(jobs, results):
        where = f"{d['dir']} ({d['class']}) {args[0]} {want['text']!r}"
        if got is None:
            print(f"FAIL ({run.returncode}) {where}: {run.stderr.strip()}")
            failures += 1
            continue
        notes = run.stderr.strip().splitlines()
        problems = []
        if got["ids"] != want["ids"] or got["text"] != want["text"]:
            problems.append(f"want text {want['text']!r} ids {want['ids']}\n  got  text {got['text']!r} ids {got['ids']}")
        if not got.get("tokenizer_class", "").startswith(d["class"] + " "):
            problems.append(f"tokenizer_class {got.get('tokenizer_class')!r}, transformers loads {d['class']}")
        if d["tokenizer_json_agrees"] and notes:
            problems.append(f"a note although the class keeps tokenizer.json: {notes}")
        if not d["tokenizer_json_agrees"] and (len(notes) != 1 or d["class"] not in notes[0]):
            problems.append(f"want one stderr line naming {d['class']} and what it changes, got {notes}")
        if problems:
            print(f"FAIL {where}:\n  " + "\n  ".join(problems))
            failures += 1
    return len(jobs), failures


def main():
    binary, root = sys.argv[1], sys.argv[2]
    with open(f"{root}/cases.json", encoding="utf-8") as f:
        fixture = json.load(f)
    if "directories" in fixture:
        total, failures = check_classes(binary, root, fixture)
        print(f"{total - failures} of {total} cases identical to transformers {fixture['versions']['transformers']} "
              f"in {len(fixture['directories'])} directories")
        sys.exit(1 if failures else 0)
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
