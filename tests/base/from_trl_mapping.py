#!/usr/bin/env python3
"""docs/from-trl.md tells a TRL user what ships today, as far as the code can say:

- every rayless key it names (`section.key`, `section.key = value`, `[section]`, the
  `[reward.workers.NAME]` / `[reward.models.NAME]` / `[tools.NAME]` tables) is one the config table has, and every
  `key = value` it shows is accepted by `rayless config check --skip-paths` (its files are examples);
- every TOML example in it passes `rayless config check --skip-paths`;
- every GRPOConfig field whose default rayless reproduces (defaults_match_trl.py's SHARED, the 49
  fields of tests/data/grpo_config_defaults.json) has its row, naming the same rayless key;
- every TRL name the code points at a rayless key (trl_names(): the hint "TRL's X is KEY here" of
  `rayless config check`, listed by `rayless config reference`) has its row, mapping it to that key, so
  that a row cannot call something unsupported once the code maps it.

  from_trl_mapping.py RAYLESS DOCS_FROM_TRL_MD
"""
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from defaults_match_trl import SHARED  # noqa: E402  (rayless key -> (GRPOConfig field, None's value))
from docs_match_code import BLOCKS, block  # noqa: E402  (the generated lists of `rayless config reference`)

NAMED = re.compile(r"^(reward\.workers|reward\.models|tools)\.[^.]+")  # a named table: the name is the user's
FILE_SUFFIXES = {"json", "jsonl", "jinja", "safetensors", "toml", "py", "h5", "md", "txt", "sh"}


def run(rayless, *args):
    return subprocess.run([rayless, *args], capture_output=True, text=True)


def config_keys(rayless, workdir):
    """Every key the config table has, named tables as reward.workers.NAME.KEY / reward.models.NAME.KEY."""
    path = os.path.join(workdir, "tables.toml")
    with open(path, "w") as f:  # one table of each kind, so that `config show` prints their keys
        f.write('[reward]\nfunctions = ["w", "m"]\n[reward.workers.w]\ncommand = "x"\n[reward.models.m]\npath = "p"\n'
                '[tools.t]\ncommand = "x"\n')
    shown = run(rayless, "config", "show", path)
    if shown.returncode != 0:
        sys.exit(f"rayless config show failed: {shown.stderr.strip()}")
    keys = set()

    def walk(prefix, table):
        for name, value in table.items():
            full = f"{prefix}.{name}" if prefix else name
            if isinstance(value, dict) and prefix in ("", "reward", "reward.workers", "reward.models", "tools"):
                walk(full, value)
            else:
                keys.add(NAMED.sub(lambda m: f"{m.group(1)}.NAME", full))

    walk("", tomllib.loads(shown.stdout))
    return keys


def code_spans(text):
    """Backticked spans outside fenced code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.findall(r"`([^`\n]+)`", prose)


def named_keys(spans, sections):
    """(key, value or None) for every span that names a rayless key; tables as ("[name]", None)."""
    out = []
    key = re.compile(r"^(%s)\.([A-Za-z0-9_.-]+)(?:\s*=\s*(.+))?$" % "|".join(map(re.escape, sorted(sections))))
    for span in spans:
        span = span.strip()
        table = re.fullmatch(r"\[([a-z_.A-Z0-9-]+)\]", span)
        if table and (table.group(1) in sections or NAMED.fullmatch(table.group(1))):
            out.append((f"[{NAMED.sub(lambda m: f'{m.group(1)}.NAME', table.group(1))}]", None))
            continue
        m = key.match(span)
        if not m or m.group(2).rsplit(".", 1)[-1] in FILE_SUFFIXES:  # tokenizer.json is a file, not a key
            continue
        out.append((NAMED.sub(lambda n: f"{n.group(1)}.NAME", f"{m.group(1)}.{m.group(2)}"), m.group(3)))
    return out


def table_rows(text):
    """(TRL fields, rayless key cell, status cell) of every three-column mapping row."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        if len(cells) != 3 or cells[0] in ("TRL field", "TRL field or argument", "TRL") or set(cells[0]) <= {"-", " "}:
            continue
        fields = [f for f in re.findall(r"`([^`]+)`", cells[0]) if re.fullmatch(r"[a-z_][a-z0-9_]*", f)]
        rows.append((fields, cells[1], cells[2]))
    return rows


def main():
    rayless, docs_path = sys.argv[1], sys.argv[2]
    text = open(docs_path, encoding="utf-8").read()
    failures = []
    with tempfile.TemporaryDirectory() as workdir:
        keys = config_keys(rayless, workdir)
        sections = {k.split(".")[0] for k in keys}
        empty = os.path.join(workdir, "empty.toml")
        open(empty, "w").close()

        # 1. every key named in prose and tables exists; every `key = value` shown is accepted
        named = named_keys(code_spans(text), sections)
        tables = {"[" + k.rsplit(".", 1)[0] + "]" for k in keys} | {f"[{s}]" for s in sections}
        for key, _ in named:
            if (key not in tables) if key.startswith("[") else (key not in keys):
                failures.append(f"from-trl.md names {key}, which the config table does not have")
        settings = sorted({f"{k}={v}" for k, v in named if v is not None and not k.startswith("[") and k in keys
                           and "NAME" not in k})
        # one check each: two settings the page shows apart may break a cross-field rule together
        # keys, values and rules (--skip-paths: the page's files are examples, not on this machine)
        checks = {f"from-trl.md shows `{s.replace('=', ' = ', 1)}`": ["config", "check", empty, "--skip-paths", "--set", s]
                  for s in settings}

        # 2. every TOML example passes config check
        for i, example in enumerate(re.findall(r"^```toml\n(.*?)^```", text, flags=re.M | re.S)):
            path = os.path.join(workdir, f"example-{i + 1}.toml")
            with open(path, "w") as f:
                f.write(example)
            checks[f"from-trl.md's TOML example {i + 1} fails config check"] = ["config", "check", path, "--skip-paths"]
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            results = dict(zip(checks, pool.map(lambda args: run(rayless, *args), checks.values())))
        failures += [f"{what}: {r.stderr.strip()}" for what, r in results.items() if r.returncode != 0]

        # 3. every GRPOConfig default rayless reproduces has its row with the same key
        rows = table_rows(text)
        for key, (field, _) in SHARED.items():
            cells = [cell for fields, cell, _ in rows if field in fields]
            if not cells:
                failures.append(f"from-trl.md has no row for GRPOConfig's {field} (rayless {key})")
            elif not any(re.match(r"`%s`" % re.escape(key), c) for c in cells):
                failures.append(f"from-trl.md maps {field} to {cells[0]}, the defaults test to {key}")

        # 4. every TRL name the code points at a key has its row, mapped to that key
        reference = run(rayless, "config", "reference").stdout.splitlines()
        pointers = [re.fullmatch(r"- `([a-z_0-9]+)` → `([a-z_.0-9]+)`", line)
                    for line in block(reference, BLOCKS["TRL name pointer"]) or []]
        if not pointers or None in pointers:
            sys.exit("rayless config reference printed no TRL name pointers, or one this test cannot read")
        for field, key in (m.groups() for m in pointers):
            found = [(cell, status) for fields, cell, status in rows if field in fields]
            if not found:
                failures.append(f"from-trl.md has no row for TRL's {field}, which rayless points at {key}")
            elif not any(re.match(r"`%s( = [^`]+)?`" % re.escape(key), cell) for cell, _ in found):
                cell, status = found[0]
                failures.append(f"from-trl.md maps {field} to {cell} ({status.split(':')[0]}), "
                                f"but rayless points {field} at {key}")

    print(f"{len(named)} key mentions, {len(settings)} settings, {len(SHARED)} defaulted fields and "
          f"{len(pointers)} TRL name pointers checked against {len(keys)} config keys")
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
