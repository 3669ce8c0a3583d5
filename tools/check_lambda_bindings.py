#!/usr/bin/env python3
"""Finds lambdas that use a structured binding of an enclosing scope: C++17 forbids capturing one, and
gcc accepts it where clang (the sanitizer build) refuses it. Usage: check_lambda_bindings.py DIR...
Prints file:line for each and exits 1 if any; a text scan, so it can name a lambda whose own parameter
has the binding's name (rename one of them)."""
import re
import sys
from pathlib import Path

BINDING = re.compile(r"auto\s*&{0,2}\s*\[([A-Za-z_][\w\s,]*)\]")
LAMBDA = re.compile(r"\[[^\[\]]*\]\s*(\([^()]*\))?\s*(mutable\s*)?(->\s*[\w:<>,\s]+)?\s*\{")


def block_end(text, open_brace):
    depth = 0
    for k in range(open_brace, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text)


def binding_scope(text, m):
    """[start, end) where the binding is visible: a range-for's body, else the rest of the block."""
    header = text.rfind("for", 0, m.start())
    if header >= 0 and text[header:m.start()].strip().startswith("for") and "(" in text[header:m.start()] \
            and ";" not in text[header:m.start()] and ":" in text[m.end():text.find(")", m.end()) + 1 or m.end()]:
        depth, k = 0, text.find("(", header)
        for k in range(k, len(text)):  # the for header's closing parenthesis
            depth += text[k] == "("
            depth -= text[k] == ")"
            if depth == 0:
                break
        rest = text[k + 1:].lstrip()
        body = k + 1 + (len(text) - k - 1 - len(rest))
        return body, (block_end(text, body) if rest.startswith("{") else text.find(";", body))
    depth = 0
    for k in range(m.end(), len(text)):
        depth += text[k] == "{"
        depth -= text[k] == "}"
        if depth < 0:
            return m.end(), k
    return m.end(), len(text)


def scan(path):
    text = Path(path).read_text(errors="replace")
    for m in BINDING.finditer(text):
        names = [n.strip() for n in m.group(1).split(",") if n.strip()]
        start, end = binding_scope(text, m)
        for lm in LAMBDA.finditer(text, start, end):
            brace = lm.end() - 1
            body, params = text[brace:block_end(text, brace)], lm.group(1) or ""
            used = [n for n in names if re.search(rf"(?<![\w.>]){re.escape(n)}\b", body)
                    and not re.search(rf"\b{re.escape(n)}\b", params)]
            if used:
                yield text.count("\n", 0, m.start()) + 1, used[0], text.count("\n", 0, lm.start()) + 1


found = 0
for root in sys.argv[1:]:
    for path in sorted(Path(root).rglob("*")):
        if path.suffix in (".cpp", ".h") and path.is_file():
            for line, name, at in scan(path):
                print(f"{path}:{line}: structured binding '{name}' is used by the lambda at line {at}; "
                      "C++17 cannot capture a binding (clang refuses it): name it with a plain variable")
                found += 1
sys.exit(1 if found else 0)
