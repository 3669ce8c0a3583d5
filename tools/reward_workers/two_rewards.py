#!/usr/bin/env python3
"""Two reward functions in one file, each usable as its own rayless worker.

    python3 tools/reward_workers/two_rewards.py no_digits    # 1.0 when the completion has no digit
    python3 tools/reward_workers/two_rewards.py brevity      # -(words beyond 8) / 8, at most 0

The functions have TRL's signature (prompts, completions, **row fields) -> list of floats (None = no
score), so one written for TRL's GRPOTrainer moves over unchanged. The loop at the bottom speaks the
worker protocol of docs/rewards.md: one JSON request per line (or {"batch": [...]}) in, one answer out.
Declare each as its own worker:

    [reward]
    functions = ["length", "no_digits", "brevity"]
    reward_weights = [1.0, 0.5, 0.5]

    [reward.workers.no_digits]
    command = "python3 tools/reward_workers/two_rewards.py no_digits"

    [reward.workers.brevity]
    command = "python3 tools/reward_workers/two_rewards.py brevity"
    batch_size = 16

rayless runs the workers of one batch at the same time, and logs rewards/no_digits/mean and
rewards/brevity/mean beside the built-ins'.
"""
import json
import sys


def no_digits(prompts, completions, **kwargs):
    return [0.0 if any(c.isdigit() for c in text) else 1.0 for text in completions]


def brevity(prompts, completions, **kwargs):
    return [min(0.0, -(len(text.split()) - 8) / 8) for text in completions]


FUNCTIONS = {"no_digits": no_digits, "brevity": brevity}


def score_all(function, requests):
    """Calls a TRL-style function on a list of protocol requests."""
    prompts = [r.get("prompt", "") for r in requests]
    completions = [r.get("completion", "") for r in requests]
    fields = {k: [r.get(k) for r in requests] for k in requests[0] if k not in ("prompt", "completion")} if requests else {}
    return function(prompts, completions, **fields)


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in FUNCTIONS:
        sys.exit(f"usage: two_rewards.py {' | '.join(FUNCTIONS)}")
    function = FUNCTIONS[sys.argv[1]]
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if "batch" in request:
            answer = {"rewards": score_all(function, request["batch"])}
        else:
            answer = {"reward": score_all(function, [request])[0]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
