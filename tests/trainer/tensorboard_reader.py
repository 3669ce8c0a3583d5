#!/usr/bin/env python3
"""Read a rayless TensorBoard log directory with TensorBoard's own loader and compare scalars.

    tensorboard_reader.py LOGDIR EXPECTED_JSON

EXPECTED_JSON is a JSON object {tag: [[step, value], ...]}. Every listed (tag, step) must be present
with its value equal up to float32 rounding (the event file stores simple_value as a float).
Exit 0 when all match, 1 when something differs, 77 (skip) when tensorboard is not installed.
"""
import json
import math
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    log_dir, expected_path = argv[1], argv[2]
    try:
        import tensorboard  # noqa: F401
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        print("SKIP: tensorboard is not installed (tools/setup_tools_venv.sh installs it)")
        return 77

    with open(expected_path) as f:
        expected = json.load(f)

    # scalars=0 keeps every scalar instead of TensorBoard's default reservoir sample.
    accumulator = EventAccumulator(log_dir, size_guidance={"scalars": 0})
    accumulator.Reload()
    present = set(accumulator.Tags().get("scalars", []))

    problems = []
    matched = 0
    for tag, pairs in expected.items():
        if tag not in present:
            problems.append(f"tag {tag!r} missing (present: {sorted(present)})")
            continue
        by_step = {event.step: event.value for event in accumulator.Scalars(tag)}
        for step, value in pairs:
            if step not in by_step:
                problems.append(f"{tag} step {step}: missing (steps present: {sorted(by_step)})")
            elif not math.isclose(by_step[step], value, rel_tol=1e-6, abs_tol=1e-30):
                problems.append(f"{tag} step {step}: read {by_step[step]!r}, expected {value!r}")
            else:
                matched += 1

    if problems:
        print("tensorboard reader: differences:")
        for problem in problems:
            print("  " + problem)
        return 1
    print(f"tensorboard reader: {len(expected)} tags, {matched} scalars match")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
