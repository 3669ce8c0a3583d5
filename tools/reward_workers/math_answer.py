#!/usr/bin/env python3
"""A rayless reward worker that checks math answers.

Protocol (docs/rewards.md): one JSON request per line on stdin, one JSON answer per line on stdout.
  {"prompt": ..., "completion": ..., "answer": ..., <other dataset fields>}  ->  {"reward": 1.0 | 0.0 | null}
  {"batch": [request, ...]}                                                ->  {"rewards": [...]}
The completion's final answer is the last \\boxed{...}, else the text after the last "####", else the
last number in the completion. It scores 1.0 when it equals the row's "answer" field as a number
(fractions such as 1/2 are understood), 0.0 otherwise, and null (no score) when the row has no answer.
Use it with:  [reward] functions = ["worker"]  worker_command = "python3 tools/reward_workers/math_answer.py"
"""
import json
import re
import sys
from fractions import Fraction

NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|[-+]?\.\d+")


def final_answer(completion):
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", completion)
    if boxed:
        return boxed[-1]
    if "####" in completion:
        return completion.rsplit("####", 1)[1]
    return completion


def as_number(text):
    """The last number in text as an exact Fraction, or None."""
    found = NUMBER.findall(str(text))
    if not found:
        return None
    try:
        return Fraction(found[-1].replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def score(request):
    expected = request.get("answer")
    if expected is None:
        return None
    want = as_number(expected)
    got = as_number(final_answer(request.get("completion", "")))
    if want is None:  # a non-numeric answer: compare the text
        return 1.0 if final_answer(request.get("completion", "")).strip() == str(expected).strip() else 0.0
    return 1.0 if got is not None and got == want else 0.0


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "batch" in request:
            answer = {"rewards": [score(r) for r in request["batch"]]}
        else:
            answer = {"reward": score(request)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()  # the trainer waits for this line


if __name__ == "__main__":
    main()
