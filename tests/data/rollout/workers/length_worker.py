#!/usr/bin/env python3
# Test worker: reward = number of characters of the completion plus the row's "bonus" field;
# null when the completion is "skip", NaN when it is "nan". Handles single and batched requests.
import json
import math
import os
import sys


def score(request):
    if request["completion"] == "skip":
        return None
    if request["completion"] == "nan":
        return math.nan
    return len(request["completion"]) + request.get("bonus", 0) + 1000 * int(os.environ.get("RAYLESS_RANK", "0"))


for line in sys.stdin:
    request = json.loads(line)
    if "batch" in request:
        print(json.dumps({"rewards": [score(r) for r in request["batch"]]}), flush=True)
    else:
        print(json.dumps({"reward": score(request)}), flush=True)
