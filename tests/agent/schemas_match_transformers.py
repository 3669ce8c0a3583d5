#!/usr/bin/env python3
"""The tool workers' JSON schemas (tools/agent_workers/rayless_agent.py, standard library only) equal
transformers' get_json_schema for the functions of tests/data/agent/schema_functions.py and the example
tools and environment (golden: tests/data/agent/schemas.json, made by tools/make_agent_golden.py); and
schemas for what get_json_schema refuses are refused with a reason.

    python3 tests/agent/schemas_match_transformers.py
"""
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools" / "agent_workers"))
import rayless_agent  # noqa: E402


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    golden = json.loads((ROOT / "tests" / "data" / "agent" / "schemas.json").read_text())
    functions = load(ROOT / "tests" / "data" / "agent" / "schema_functions.py", "schema_functions")
    calculator = load(ROOT / "tools" / "agent_workers" / "calculator.py", "calculator")
    guess = load(ROOT / "tools" / "agent_workers" / "guess_number.py", "guess_number")
    failures = []

    def compare(what, got, want):
        # key order too: the chat template shows the schema with tojson, in this order
        if json.dumps(got) != json.dumps(want):
            failures.append(f"{what}:\n  ours:         {json.dumps(got)}\n  transformers: {json.dumps(want)}")

    for f in functions.FUNCTIONS:
        compare(f.__name__, rayless_agent.tool_schema(f), golden["functions"][f.__name__])
    for f, want in zip([calculator.add, calculator.multiply, calculator.divide], golden["calculator"], strict=True):
        compare(f"calculator.{f.__name__}", rayless_agent.tool_schema(f), want)
    compare("GuessNumber.guess", rayless_agent.tool_schema(guess.GuessNumber().guess), golden["guess_number"][0])

    def no_doc(x: int):
        pass

    def no_hint(x):
        """Has no hint.

        Args:
            x: something
        """

    def undocumented(x: int):
        """Describes nothing."""

    def custom(x: object):
        """A custom class.

        Args:
            x: an object
        """

    for f, reason in ((no_doc, "no docstring"), (no_hint, "no type hint"), (undocumented, "does not describe"),
                      (custom, "no JSON schema")):
        try:
            rayless_agent.tool_schema(f)
            failures.append(f"{f.__name__}: no error")
        except rayless_agent.SchemaError as e:
            if reason not in str(e):
                failures.append(f"{f.__name__}: {e!r} does not say {reason!r}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"schemas ok: {len(golden['functions']) + 4} functions match transformers' get_json_schema")


if __name__ == "__main__":
    main()
