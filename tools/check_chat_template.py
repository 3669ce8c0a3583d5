#!/usr/bin/env python3
"""Check that `rayless tokenize` renders chat templates exactly as transformers does.

Each template file (or every *.jinja in a directory given) is rendered for a fixed set of conversations,
with and without the generation prompt (and with enable_thinking true/false where the template reads it),
once by transformers (`apply_chat_template` on the tokenizer of --model, its chat_template replaced by the
file's text) and once by `rayless tokenize --model DIR --chat-template FILE --messages ... --json`. Text and
ids must be identical; where transformers raises, rayless must exit 2 with one line on stderr. Tools go to
transformers as `tools=` and to rayless as `--kwargs {"tools": ...}`. Both sides run under TZ=UTC, so
`strftime_now` gives the same date (the date is printed; do not run it across midnight UTC).

Templates of public models are not kept in this repository (licensing): keep them outside, e.g.
/tmp/real-templates. Needs transformers (tools/trl_steps/setup_venv.sh makes .venv-trl):

    .venv-trl/bin/python tools/check_chat_template.py /tmp/real-templates            # every *.jinja there
    .venv-trl/bin/python tools/check_chat_template.py a.jinja b.jinja --verbose      # full texts on DIFF

Exit status 0 when every case is OK or raises on both sides, 1 otherwise.
"""
import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["TZ"] = "UTC"
time.tzset()

from transformers import AutoTokenizer  # noqa: E402  (after TZ is set, as strftime_now reads local time)

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city (météo, 天気)",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}]

THINK = "<think>\nThe user wants a greeting.\n</think>\n\nHello! How can I help?"

CONVERSATIONS = {
    "system+user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is 2+2?"}],
    "user": [{"role": "user", "content": "Hello!"}],
    "multi-turn": [{"role": "user", "content": "Is 7 prime?"},
                   {"role": "assistant", "content": "Yes, 7 is prime."},
                   {"role": "user", "content": "And 9?"}],
    "think-history": [{"role": "system", "content": "Think first."},
                      {"role": "user", "content": "Hi"},
                      {"role": "assistant", "content": THINK},
                      {"role": "user", "content": "Tell me a joke."}],
    "think-final": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": THINK}],
    "reasoning-field": [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."}],
    "content-parts": [{"role": "user", "content": [{"type": "text", "text": "Describe a cat."}]}],
    "unicode-ws": [{"role": "system", "content": "  Réponds en français.\n"},
                   {"role": "user", "content": "Ça va? 日本語 🙂 \"quoted\" back\\slash\ttab  \n\n"},
                   {"role": "assistant", "content": "  Très bien!  "},
                   {"role": "user", "content": "<|im_end|> {{ not a tag }} {% raw %}"}],
    "bad-roles": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    "tools": [{"role": "system", "content": "You can call tools."},
              {"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": "", "tool_calls": [{
                  "id": "call_abc123456", "type": "function",
                  "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
              {"role": "tool", "tool_call_id": "call_abc123456", "name": "get_weather",
               "content": "{\"temperature\": 21}"},
              {"role": "user", "content": "Thanks!"}],
    "tools-string-args": [{"role": "user", "content": "Weather in Paris?"},
                          {"role": "assistant", "content": None, "tool_calls": [{
                              "id": "call_xyz987654", "type": "function",
                              "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                          {"role": "tool", "tool_call_id": "call_xyz987654", "name": "get_weather",
                           "content": "sunny, 21 °C"}],
}


def cases_for(template):
    """(case name, conversation name, add_generation_prompt, kwargs) for one template's text."""
    kwarg_sets = [{}]
    if "enable_thinking" in template:
        kwarg_sets += [{"enable_thinking": False}, {"enable_thinking": True}]
    for conv in CONVERSATIONS:
        if conv.startswith("tools") and "tools" not in template:
            continue
        for kwargs in kwarg_sets:
            for gen in (True, False):
                name = conv + ("" if gen else " nogen")
                name += "".join(f" {k}={json.dumps(v)}" for k, v in kwargs.items())
                yield name, conv, gen, kwargs


def transformers_render(tok, template, conv, gen, kwargs):
    extra = dict(kwargs)
    if conv.startswith("tools"):
        extra["tools"] = TOOLS
    messages = json.loads(json.dumps(CONVERSATIONS[conv]))  # a fresh copy: templates may not mutate ours
    try:
        text = tok.apply_chat_template(messages, chat_template=template, add_generation_prompt=gen,
                                       tokenize=False, **extra)
        ids = tok.apply_chat_template(messages, chat_template=template, add_generation_prompt=gen,
                                      tokenize=True, return_dict=False, **extra)
        return {"text": text, "ids": list(ids)}
    except Exception as e:  # noqa: BLE001 - a raising template is a case of its own
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0]}


def rayless_render(binary, model, path, conv_file, conv, gen, kwargs):
    extra = dict(kwargs)
    if conv.startswith("tools"):
        extra["tools"] = TOOLS
    cmd = [binary, "tokenize", "--model", model, "--chat-template", path, "--messages", conv_file, "--json"]
    if extra:
        cmd += ["--kwargs", json.dumps(extra)]
    if not gen:
        cmd.append("--no-generation-prompt")
    run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "TZ": "UTC"})
    if run.returncode != 0:
        return {"error": run.stderr.strip(), "rc": run.returncode, "cmd": cmd}
    return {**json.loads(run.stdout), "cmd": cmd}


def first_diff(a, b):
    n = min(len(a), len(b))
    i = next((k for k in range(n) if a[k] != b[k]), n)
    return i


def compare(want, got, verbose):
    """('OK' | 'both-raise' | 'DIFF', detail)."""
    if "error" in want:
        if "error" not in got:
            return "DIFF", f"transformers raises ({want['error']}) but rayless rendered {got['text'][:80]!r}"
        lines = got["error"].splitlines()
        if got["rc"] != 2 or len(lines) != 1:
            return "DIFF", f"both raise, but rayless rc {got['rc']} with {len(lines)} stderr lines: {got['error']!r}"
        return "both-raise", f"transformers: {want['error'][:90]} | rayless: {lines[0][:120]}"
    if "error" in got:
        return "DIFF", f"rayless rc {got['rc']}: {got['error']!r}"
    if want["text"] != got["text"]:
        i = first_diff(want["text"], got["text"])
        lo = max(0, i - 30)
        detail = (f"text at char {i}: transformers {want['text'][lo:i + 50]!r} | rayless {got['text'][lo:i + 50]!r}")
        if verbose:
            detail += f"\n    transformers: {want['text']!r}\n    rayless:      {got['text']!r}"
        return "DIFF", detail
    if want["ids"] != got["ids"]:
        i = first_diff(want["ids"], got["ids"])
        return "DIFF", f"ids at {i} (texts equal): transformers {want['ids'][i:i + 8]} | rayless {got['ids'][i:i + 8]}"
    return "OK", ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("templates", nargs="+", help=".jinja files, or directories of them")
    ap.add_argument("--rayless", default=os.path.join(ROOT, "build", "rayless"))
    ap.add_argument("--model", default=os.path.join(ROOT, "tests", "data", "chat-models", "header-jinja-file"),
                    help="tokenizer directory used by both sides (bos/eos tokens, ids)")
    ap.add_argument("--verbose", action="store_true", help="print both full texts for every text DIFF")
    ap.add_argument("--jobs", type=int, default=8)
    args = ap.parse_args()

    paths = []
    for p in args.templates:
        paths += sorted(glob.glob(os.path.join(p, "*.jinja"))) if os.path.isdir(p) else [p]
    model = os.path.abspath(args.model)
    tok = AutoTokenizer.from_pretrained(model)
    day = datetime.datetime.now().strftime("%Y-%m-%d")
    print(f"model {model}: bos_token {tok.bos_token!r}, eos_token {tok.eos_token!r}; TZ=UTC, date {day}")

    tmp_dir = tempfile.TemporaryDirectory(prefix="check-chat-template-")
    tmp = tmp_dir.name
    conv_files = {}
    for name, messages in CONVERSATIONS.items():
        conv_files[name] = os.path.join(tmp, name + ".json")
        with open(conv_files[name], "w", encoding="utf-8") as f:
            json.dump(messages, f, ensure_ascii=False)

    jobs = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            template = f.read()
        for case, conv, gen, kwargs in cases_for(template):
            jobs.append((path, template, case, conv, gen, kwargs))
    wants = [transformers_render(tok, template, conv, gen, kwargs) for _, template, _, conv, gen, kwargs in jobs]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        gots = list(pool.map(lambda j: rayless_render(args.rayless, model, os.path.abspath(j[0]),
                                                      conv_files[j[3]], j[3], j[4], j[5]), jobs))
    tmp_dir.cleanup()
    if datetime.datetime.now().strftime("%Y-%m-%d") != day:
        print("WARNING: the UTC date changed during the run; strftime_now cases may differ for that reason")

    counts = {"OK": 0, "both-raise": 0, "DIFF": 0}
    width = max(len(os.path.basename(j[0])) for j in jobs)
    print(f"{'template':<{width}}  {'case':<40} result")
    for (path, _, case, *_), want, got in zip(jobs, wants, gots):
        status, detail = compare(want, got, args.verbose)
        counts[status] += 1
        line = f"{os.path.basename(path):<{width}}  {case:<40} {status}"
        print(line + (f"  {detail}" if detail and status != "OK" else ""))
    print(f"\n{len(jobs)} cases over {len(paths)} templates: {counts['OK']} OK, {counts['both-raise']} both-raise, "
          f"{counts['DIFF']} DIFF")
    sys.exit(1 if counts["DIFF"] else 0)


if __name__ == "__main__":
    main()
