#!/usr/bin/env python3
"""Serve TRL-style tools and environments to `rayless train` (docs/tools.md).

rayless runs no Python itself: each `[tools.NAME]` table and the `[environment]` table start one
long-running worker process per rank that speaks JSON lines on stdin/stdout. This module is that
worker. It needs nothing beyond the Python standard library.

Tools: plain functions with type hints and a Google-style docstring, exactly what TRL's
`GRPOTrainer(tools=[...])` takes. Serve the functions of a module unchanged:

    python3 tools/agent_workers/rayless_agent.py tools my_tools.py            # every public function
    python3 tools/agent_workers/rayless_agent.py tools my_tools.py add mul    # these, in this order

or from the module itself: `serve_tools([add, multiply])`.

Environments: a class as TRL's `environment_factory` takes it: `reset(**row)` returns the first
observation (appended to the prompt's last message) or None, every public method is a tool of that
rollout's instance, and an optional `get_reward()` scores the rollout:

    python3 tools/agent_workers/rayless_agent.py environment my_env.py GuessNumber

Protocol (one JSON object per line each way, answers in order):

    {"describe": {}}                               -> {"tools": [schema, ...]}
                                                      environments also: "environment": class name,
                                                      "reward": whether get_reward exists
    {"call": {"name": n, "arguments": {...}}}      -> {"result": text, "failed": bool, "async": bool}
    {"call": {...}, "instance": k}                 -> the same, on environment instance k
    {"reset": {"instance": k, "row": {...}}}       -> {"observation": text | list | null}
    {"reward": {"instances": [k, ...]}}            -> {"rewards": [number | null, ...]}

A call runs as TRL runs it: `tool(**arguments)`; an exception becomes the result
`str({"error": str(exception)})` with "failed": true, an unknown name `Tool NAME not found.` the
same way; any other result becomes `str(result)` (a list of content parts stays a list). Schemas
follow transformers' `get_json_schema` (signature + docstring).
"""

from __future__ import annotations

import asyncio
import enum
import importlib.util
import inspect
import json
import os
import re
import sys
import types
import typing

__all__ = ["tool_schema", "serve_tools", "serve_environment", "SchemaError"]


class SchemaError(Exception):
    """A function that cannot be described to the model (no docstring, a parameter without a type hint
    or description, a type hint with no JSON equivalent)."""


# ---------------------------------------------------------------------------------------------------
# JSON schemas of functions, as transformers.utils.get_json_schema writes them

_SECTION_HEADS = ("Args:", "Returns:", "Raises:")
# A parameter line of the Args: block: indentation, name, an optional "(type)", a colon.
_PARAMETER_LINE = re.compile(r"([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:")
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)
_JSON_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_PLAIN_TYPES = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
                bool: {"type": "boolean"}, type(None): {"type": "null"}, list: {"type": "array"},
                tuple: {"type": "array"}, dict: {"type": "object"}, typing.Any: {}}


def _first_section(text: str, start: int, heads) -> int:
    """Where the earliest of `heads` occurs in text[start:] (len(text) when none does)."""
    found = [text.find(head, start) for head in heads]
    found = [at for at in found if at >= 0]
    return min(found) if found else len(text)


def _block_after(text: str, head: str, ends) -> str | None:
    """The text of a section that starts on its own line ("\\n  Args:\\n"), up to the next section head
    among `ends` (anywhere after it) or the end, trailing whitespace dropped; None when absent."""
    match = re.search(r"\n\s*" + re.escape(head) + r"\n", text)
    if match is None:
        return None
    stop = _first_section(text, match.end(), ends)
    return text[match.end():stop].rstrip()


def _parameter_docs(block: str) -> dict:
    """name -> description of an Args: block. An entry runs until the next "name:" line that is not
    indented deeper than the entry's own first line; continuation lines are joined with spaces."""
    lines = [line for line in block.split("\n") if line.strip()]
    entries = []  # [indent, name, [text pieces]]
    for line in lines:
        match = _PARAMETER_LINE.match(line)
        if match is not None:
            indent = match.group(1)
            deeper = entries and line.startswith(entries[-1][0]) and line[len(entries[-1][0]):][:1] in (" ", "\t")
            if not entries or not deeper:
                entries.append([indent, match.group(2), [line[match.end():]]])
                continue
        if entries:
            entries[-1][2].append(line)
    docs = {}
    for _, name, pieces in entries:
        text = "\n".join(pieces).strip()
        docs[name] = re.sub(r"\s*\n+\s*", " ", text)
    return docs


def _read_docstring(doc: str):
    description = doc[:_first_section(doc, 0, _SECTION_HEADS)].strip()
    args = _block_after(doc, "Args:", ("Returns:", "Raises:"))
    returns = _block_after(doc, "Returns:", ("Raises:",))
    if returns is not None:
        returns = returns.strip()
    return description, _parameter_docs(args) if args is not None else {}, returns


def _enum_schema(values: list) -> dict:
    kinds = list(dict.fromkeys(_JSON_SCALARS[type(v)] for v in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _type_schema(hint) -> dict:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None and isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [member.value for member in hint]
        if not values:
            raise SchemaError(f"the Enum {hint.__name__} has no members")
        if any(type(v) not in _JSON_SCALARS for v in values):
            raise SchemaError(f"the Enum {hint.__name__} has values that are not JSON scalars: {values}")
        return _enum_schema(values)
    if origin is None:
        try:
            return dict(_PLAIN_TYPES[hint])
        except (KeyError, TypeError):
            raise SchemaError(f"no JSON schema for the type hint {hint!r} (use int, float, str, bool, Enum, "
                              "Literal, or list / tuple / dict / Union of those)") from None
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        members = [_type_schema(t) for t in args if t is not type(None)]
        if len(members) == 1:
            out = members[0]
        elif all(m.keys() == {"type"} and isinstance(m["type"], str) for m in members):
            names = sorted({m["type"] for m in members})
            out = {"type": names[0] if len(names) == 1 else names}
        else:
            out = {"anyOf": members}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is typing.Literal and args:
        if any(type(a) not in _JSON_SCALARS for a in args):
            raise SchemaError("typing.Literal may list only int, float, str, bool and None values")
        return _enum_schema(list(args))
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1:
            raise SchemaError(f"a tuple of one element ({hint}) has no schema: use the element, or a list")
        if ... in args:
            raise SchemaError(f"tuple[..., ...] ({hint}) has no schema: use a list")
        return {"type": "array", "prefixItems": [_type_schema(t) for t in args]}
    if origin is dict:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = _type_schema(args[1])
        return out
    raise SchemaError(f"no JSON schema for the type hint {hint!r}")


def _parameters_schema(func) -> dict:
    hints = typing.get_type_hints(func)
    signature = inspect.signature(func)
    name = getattr(func, "__name__", "operation")
    parameters = list(signature.parameters.values())
    receiver = None  # an unannotated first `self` / `cls` is the method's receiver, not a parameter
    if parameters and parameters[0].name in ("self", "cls") and parameters[0].annotation is inspect.Parameter.empty:
        receiver = parameters[0].name
    required = []
    for p in parameters:
        if p.name == receiver:
            continue
        if p.annotation is inspect.Parameter.empty:
            raise SchemaError(f"argument {p.name} of {name} has no type hint")
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    properties = {}
    for key, hint in hints.items():
        if key == receiver:
            continue
        if key == "return":
            try:  # the model never writes the return value: an unusual return hint is left out
                properties[key] = _type_schema(hint)
            except SchemaError:
                pass
        else:
            properties[key] = _type_schema(hint)
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def tool_schema(func) -> dict:
    """{"type": "function", "function": {"name", "description", "parameters", ["return"]}} of a function
    or bound method, from its signature and Google-style docstring (transformers' get_json_schema)."""
    name = getattr(func, "__name__", "operation")
    doc = inspect.getdoc(func)
    if not doc:
        raise SchemaError(f"{name} has no docstring: tools are described to the model by their docstring")
    description, parameter_docs, returns_doc = _read_docstring(doc.strip())
    parameters = _parameters_schema(func)
    returned = parameters["properties"].pop("return", None)
    if returned is not None and returns_doc is not None:
        returned["description"] = returns_doc
    for key, schema in parameters["properties"].items():
        if key not in parameter_docs:
            raise SchemaError(f"the docstring of {name} does not describe its argument '{key}' (Args: section)")
        text = parameter_docs[key]
        choices = _CHOICES.search(text)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text = text[:choices.start()].strip()
        schema["description"] = text
    out = {"name": name, "description": description, "parameters": parameters}
    if returned is not None:
        out["return"] = returned
    return {"type": "function", "function": out}


# ---------------------------------------------------------------------------------------------------
# Running a call as TRL's GRPOTrainer._tool_call_loop does


def _run_call(table: dict, call: dict) -> dict:
    name = call.get("name")
    arguments = call.get("arguments")
    tool = table.get(name) if isinstance(name, str) else None
    is_async = tool is not None and inspect.iscoroutinefunction(tool)
    try:
        if tool is None:
            raise ValueError(f"Tool {name} not found.")
        result = tool(**arguments)
        if is_async:
            result = asyncio.run(result)
        failed = False
    except Exception as error:  # what TRL catches; SystemExit and the like end the worker, as they end TRL
        result, failed = {"error": str(error)}, True
    content = result if isinstance(result, list) else str(result)
    return {"result": content, "failed": failed, "async": is_async}


def _as_json_text(value) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # a list of parts holding something JSON cannot (an image): its str
        return json.dumps(str(value), ensure_ascii=False)


def _serve(handle) -> None:
    # stdout carries the protocol only: a print() inside a tool goes to stderr, which reaches the trainer's log
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        answer = handle(json.loads(line))
        protocol.write(_as_json_text(answer) + "\n")
        protocol.flush()


def serve_tools(functions) -> None:
    """Answers describe and call requests for these functions until stdin closes."""
    functions = list(functions)
    schemas = [tool_schema(f) for f in functions]
    table = {f.__name__: f for f in functions}

    def handle(request):
        if "describe" in request:
            return {"tools": schemas}
        return _run_call(table, request["call"])

    _serve(handle)


def _environment_members(cls):
    """What TRL finds on an environment class: reset, get_reward, and the public methods (by name)."""
    names = [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)]
    tools = [n for n in names if n not in ("reset", "get_reward") and not n.startswith("_")]
    return "reset" in names, "get_reward" in names, tools


def serve_environment(factory) -> None:
    """Answers describe, reset, call and reward requests for instances of factory() until stdin closes.
    Instances are made once and reset for each new rollout (instance k serves row k of a batch)."""
    pool = [factory()]  # the probe TRL makes to read the methods, kept as the first instance
    has_reset, has_reward, tool_names = _environment_members(type(pool[0]))
    if not has_reset:
        raise SchemaError(f"{type(pool[0]).__name__} has no reset method: an environment needs reset(**row)")
    schemas = [tool_schema(getattr(pool[0], n)) for n in tool_names]

    def instance(k):
        while len(pool) <= k:
            pool.append(factory())
        return pool[k]

    def handle(request):
        if "describe" in request:
            return {"environment": type(pool[0]).__name__, "tools": schemas, "reward": has_reward}
        if "reset" in request:
            observation = instance(request["reset"]["instance"]).reset(**request["reset"]["row"])
            if observation is not None and not isinstance(observation, (str, list)):
                observation = str(observation)
            return {"observation": observation}
        if "reward" in request:
            rewards = []
            for k in request["reward"]["instances"]:
                value = instance(k).get_reward()
                rewards.append(asyncio.run(value) if inspect.isawaitable(value) else value)
            return {"rewards": rewards}
        env = instance(request["instance"])
        table = {n: getattr(env, n) for n in tool_names}
        return _run_call(table, request["call"])

    _serve(handle)


# ---------------------------------------------------------------------------------------------------
# Command line: serve the functions or the class of a Python file


def _load_module(path: str):
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"rayless_agent: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    return module


def main(argv) -> None:
    usage = "usage: rayless_agent.py tools FILE.py [FUNCTION ...] | environment FILE.py CLASS"
    if len(argv) < 2 or argv[0] not in ("tools", "environment"):
        raise SystemExit(usage)
    module = _load_module(argv[1])
    if argv[0] == "tools":
        if len(argv) > 2:
            functions = [getattr(module, name) for name in argv[2:]]
        else:
            functions = [f for name, f in vars(module).items()
                         if inspect.isfunction(f) and f.__module__ == module.__name__ and not name.startswith("_")]
        serve_tools(functions)
    else:
        if len(argv) != 3:
            raise SystemExit(usage)
        serve_environment(getattr(module, argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
