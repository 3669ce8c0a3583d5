#!/usr/bin/env python3
"""A worker that answers its first request only once its partner worker has received one too:
    rendezvous.py MY_NAME PARTNER_NAME DIR
It marks DIR/MY_NAME, then waits (at most 30 s) for DIR/PARTNER_NAME. Two such workers in one
reward.functions finish only when rayless asks them at the same time; asked one after the other,
the first waits past its timeout_s and the run fails. Scores 1.0."""
import json
import os
import sys
import time

me, partner, directory = sys.argv[1:4]
first = True
for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    if first:
        open(os.path.join(directory, me), "w").close()
        deadline = time.time() + 30
        while not os.path.exists(os.path.join(directory, partner)) and time.time() < deadline:
            time.sleep(0.01)
        first = False
    n = len(request["batch"]) if "batch" in request else None
    sys.stdout.write(json.dumps({"rewards": [1.0] * n} if n is not None else {"reward": 1.0}) + "\n")
    sys.stdout.flush()
