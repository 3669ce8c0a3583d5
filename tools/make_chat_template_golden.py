#!/usr/bin/env python3
"""Regenerates tests/data/chat-templates/cases.json: what transformers renders for our chat templates.

Run from the repository root with the reference environment (transformers, tokenizers, jinja2):

    .venv-trl/bin/python tools/make_chat_template_golden.py

For every template tests/data/chat-templates/*.jinja and every conversation below, it calls
`PreTrainedTokenizerFast(...).apply_chat_template(..., tokenize=False)` and records the context the
template actually received (messages after transformers' own preprocessing, tools, add_generation_prompt,
special tokens, kwargs; captured by wrapping transformers' template compiler) with the text it rendered,
or, when transformers raised, the template line jinja2 reported and the message. It also records "snippets":
small templates rendered through transformers' jinja2 environment that pin down Python semantics.

strftime_now is made deterministic: the process runs with TZ=UTC and transformers' `datetime.now()` is
patched to return NOW (below); the C++ test renders with RenderOptions.now = NOW under TZ=UTC.
Versions of transformers and jinja2 are written into the JSON.
"""
import json
import os
import sys
import time
from pathlib import Path

os.environ["TZ"] = "UTC"
time.tzset()

from datetime import datetime as _datetime  # noqa: E402

import jinja2  # noqa: E402
import transformers  # noqa: E402
import transformers.utils.chat_template_utils as chat_utils  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE_DIR = ROOT / "tests/data/chat-templates"
TOKENIZER_FILE = ROOT / "tests/data/hf-golden/tokenizer-qwen2.json"
NOW = 1721995200  # 2024-07-26 12:00:00 UTC: what strftime_now sees


class FixedDatetime(_datetime):
    @classmethod
    def now(cls, tz=None):
        return _datetime.fromtimestamp(NOW, tz)


chat_utils.datetime = FixedDatetime
_captured = {}
_compile = chat_utils._compile_jinja_template


class _CapturingTemplate:
    """Records the keyword arguments transformers renders the template with."""

    def __init__(self, template):
        self.template = template

    def render(self, **context):
        _captured["context"] = context
        return self.template.render(**context)


chat_utils._compile_jinja_template = lambda text: _CapturingTemplate(_compile(text))

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds numbers.",
     "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number", "default": 0.5}}}}},
]
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is 2+2?"}
USER2 = {"role": "user", "content": "And 3+3? Ünïcödé, 'single' and \"double\" quotes, a tab\there."}
ANSWER = {"role": "assistant", "content": "  4.  "}
THINKING_ANSWER = {"role": "assistant", "content": "<think>\nAdd two and two.\n</think>\n\n2+2 = 4."}
TOOL_CALL = {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]}
TOOL_RESULT = {"role": "tool", "name": "get_weather", "tool_call_id": "call12345", "content": "22 degrees, sunny"}
PARTS_USER = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe this."},
                                          {"type": "text", "text": " Briefly. "}]}

# name -> (messages, add_generation_prompt, extra apply_chat_template kwargs)
CONVERSATIONS = {
    "single_user": ([USER], True, {}),
    "system_user": ([SYSTEM, USER], True, {}),
    "multi_turn_think": ([SYSTEM, USER, THINKING_ANSWER, USER2], True, {}),
    "multi_turn_no_prompt": ([USER, ANSWER, USER2, THINKING_ANSWER], False, {}),
    "enable_thinking_false": ([USER, THINKING_ANSWER, USER2], True, {"enable_thinking": False}),
    "reasoning_field": ([USER, {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two."}, USER2],
                        True, {}),
    "tools": ([SYSTEM, {"role": "user", "content": "Weather in Paris?"}, TOOL_CALL, TOOL_RESULT], True,
              {"tools": TOOLS}),
    "tools_date_kwarg": ([{"role": "user", "content": "Weather in Paris?"}], True,
                         {"tools": TOOLS[:1], "date_string": "01 Jan 2025"}),
    "content_parts": ([PARTS_USER, {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}], False, {}),
    "roles_not_alternating": ([USER, USER2], True, {}),
    "two_tool_calls": ([USER, {"role": "assistant", "content": "", "tool_calls": TOOL_CALL["tool_calls"] * 2}], False,
                       {"tools": TOOLS}),
}

SNIPPETS = [
 ("{{ true }}|{{ false }}|{{ none }}|{{ True }}|{{ None }}", {}),
 ("{{ 1.0 }}|{{ 0.1 }}|{{ 1e-05 }}|{{ 1e16 }}|{{ 123456789.0 }}|{{ 1.5e300 }}|{{ -0.0 }}|{{ 2.5e-4 }}|{{ 0.0001 }}|{{ 1/3 }}", {}),
 ("{{ x }}|{{ y }}|{{ z }}", {"x": 3.14, "y": 10, "z": -2.0}),
 ("{{ [1, 'a', none, true, 1.5] }}|{{ {'a': 1, 'b': [2]} }}|{{ ('x',) }}|{{ (1, 2) }}|{{ () }}", {}),
 ("{{ \"it's\" }}|{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'bs\\\\'] }}", {}),
 ("{{ m }}", {"m": {"role": "user", "content": "hé 'x'", "n": None, "b": True, "f": 2.0}}),
 ("{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ 4 / 2 }}", {}),
 ("{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1, 2] + [3] }}|{{ 'a' ~ 1 ~ none ~ true }}|{{ 1 + 2.5 }}|{{ true + 1 }}", {}),
 ("{{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 1 == 1.0 }}|{{ 'a' != 'a' }}", {}),
 ("{{ 'a' in 'cat' }}|{{ 'x' not in 'cat' }}|{{ 1 in [1, 2] }}|{{ 'k' in d }}|{{ 'z' in d }}|{{ 'a' in undefined_thing }}", {"d": {"k": 1}}),
 ("{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 'z' }}|{{ not [] }}|{{ none or [] }}|{{ [] or {} }}", {}),
 ("{{ 'yes' if x else 'no' }}|{{ 'yes' if y else 'no' }}|[{{ 'a' if false }}]", {"x": [0], "y": {}}),
 ("{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ s[1:4:2] }}|{{ s[10:] }}|{{ s[-100:2] }}|{{ l[::-1] }}|{{ l[1:] }}|{{ l[-1] }}|{{ l[::2] }}|{{ l[5:1:-2] }}", {"s": "hello", "l": [0, 1, 2, 3, 4, 5, 6]}),
 ("{{ u[1] }}|{{ u[::-1] }}|{{ u|length }}|{{ u[1:3] }}", {"u": "héllo wörld"}),
 ("{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nhi\\n'.lstrip() }}|{{ 'hi\\n\\n'.rstrip('\\n') }}|{{ 'abcba'.lstrip('ab') }}|{{ ' a '.rstrip() }}|", {}),
 ("{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a b '.split(None, 1) }}|{{ 'a b c'.rsplit(None, 1) }}|{{ ''.split() }}|{{ ''.split(',') }}", {}),
 ("{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'Hello World'.upper() }}|{{ 'Hello'.lower() }}|{{ 'hello world-foo'.title() }}|{{ 'hELLO'.capitalize() }}", {}),
 ("{{ 'aaa'.replace('a', 'b') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abcabc'.find('c') }}|{{ 'abc'.find('z') }}|{{ 'abcabc'.rfind('b') }}|{{ 'aXbXc'.count('X') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}", {}),
 ("{{ '123'.isdigit() }}|{{ '12a'.isdigit() }}|{{ 'abc'.isalpha() }}|{{ '  '.isspace() }}|{{ 'ABC'.isupper() }}|{{ 'abc'.islower() }}|{{ 'x'.center(5, '*') }}|{{ 'x'.ljust(3) }}|{{ '7'.zfill(3) }}", {}),
 ("{{ '{} and {}'.format('a', 1) }}|{{ '{0}-{0}'.format('x') }}|{{ '{name}!'.format(name='n') }}|{{ 'a=%s b=%d'|format('x', 3) }}|{{ '%s' % 'y' }}|{{ '%.2f' % 3.14159 }}", {}),
 ("{{ 'a:b:c'.partition(':') }}|{{ 'a:b:c'.rpartition(':') }}|{{ 'prefix_x'.removeprefix('prefix_') }}", {}),
 ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d['b'] }}|{{ d.b }}", {"d": {"a": 1, "b": [1, 2]}}),
 ("{% for x in l %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.cycle('o', 'e') }} {% endfor %}", {"l": ["a", "b", "c"]}),
 ("{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {"l": [1, 2, 3]}),
 ("{% for x in l %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {"l": [1, 2, 3, 4, 5]}),
 ("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
 ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", {}),
 ("{% set ns = namespace(total=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}|{{ ns.found }}", {}),
 ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (1, 2) %}{{ t }}|{% set s %}  block {{ 1 + 1 }}  {% endset %}[{{ s }}]|{% set u | upper %}up{% endset %}{{ u }}", {}),
 ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }}|{{ greet('B', '?') }}|{{ greet(name='C', punct='.') }}", {}),
 ("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}", {}),
 ("{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% raw %}{{ not rendered }}{% endraw %}", {}),
 ("{{ x is defined }}|{{ y is undefined }}|{{ none is none }}|{{ 'a' is string }}|{{ 1 is number }}|{{ true is number }}|{{ 1 is integer }}|{{ true is integer }}|{{ 1.0 is float }}|{{ true is boolean }}|{{ true is true }}|{{ 0 is false }}", {"x": 1}),
 ("{{ d is mapping }}|{{ l is mapping }}|{{ l is iterable }}|{{ 's' is iterable }}|{{ d is sequence }}|{{ 5 is iterable }}|{{ range is callable }}|{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}", {"d": {}, "l": []}),
 ("{{ 1 is eq 1 }}|{{ 1 is equalto 2 }}|{{ 2 is ne 1 }}|{{ 1 is lt 2 }}|{{ 2 is gt 1 }}|{{ 1 is le 1 }}|{{ 1 is ge 2 }}|{{ 'a' is in 'abc' }}|{{ x is sameas none }}|{{ 1 is == 1 }}", {"x": None}),
 ("{{ x is not none }}|{{ x is not defined }}|{{ not x is defined }}", {"x": 0}),
 ("[{{ missing }}]|{{ missing|default('dflt') }}|{{ ''|default('e', true) }}|{{ ''|d('e') }}|{{ missing is defined }}|{{ missing|length }}|{% for x in missing %}x{% endfor %}|{{ missing == missing }}|{{ missing|list }}", {}),
 ("{{ ' x '|trim }}|{{ 'xyx'|trim('x') }}|{{ [1, 2]|length }}|{{ 'abc'|count }}|{{ {'a': 1}|length }}|{{ 1|string }}|{{ 'aBc'|lower }}|{{ 'aBc'|upper }}|{{ 'hello world-x(y)'|title }}|{{ 'hELLO wORLD'|capitalize }}", {}),
 ("{{ 'aXbX'|replace('X', '-') }}|{{ 'aXbX'|replace('X', '-', 1) }}|{{ [1, 2, 3]|join(', ') }}|{{ ['a', 'b']|join }}|{{ [1, 2]|first }}|{{ [1, 2]|last }}|{{ 'abc'|list }}|{{ 'abc'|first }}", {}),
 ("{{ msgs|map(attribute='role')|list }}|{{ msgs|map(attribute='role')|join(',') }}|{{ ['a', 'b']|map('upper')|list }}|{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}|{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|first }}|{{ [1, 0, 2]|select|list }}|{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('even')|list }}|{{ msgs|selectattr('tool')|list }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c", "tool": True}]}),
 ("{{ '42'|int }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '2.5'|float }}|{{ 'q'|float }}|{{ -3|abs }}|{{ -2.5|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(method='floor') }}|{{ 3|round }}", {}),
 ("{{ '<a>'|safe }}|{{ '<a href=\"x\">&'|e }}|{{ '<b>'|escape }}|{{ d|items|list }}|{{ d|dictsort }}|{{ d|dictsort(reverse=true) }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ [1, 3, 2]|sort(reverse=true) }}", {"d": {"b": 1, "A": 2}}),
 ("{{ users|sort(attribute='age')|map(attribute='name')|join }}|{{ ['a', 'A', 'b']|unique|list }}|{{ [1, 2, 3]|sum }}|{{ users|sum(attribute='age') }}|{{ [3, 1, 2]|min }}|{{ [3, 1, 2]|max }}|{{ ['B', 'a']|max }}|{{ users|max(attribute='age') }}", {"users": [{"name": "x", "age": 30}, {"name": "y", "age": 20}]}),
 ("{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3]|batch(2, 0)|list }}|{{ 'one two  three'|wordcount }}|[{{ 'ab'|center(6) }}]|{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}", {}),
 ("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", {}),
 ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ l|tojson }}|{{ 'héllo \"q\" \\n </script>'|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ none|tojson }}|{{ 1.0|tojson }}|{{ [[], {}]|tojson(indent=2) }}", {"d": {"z": 1, "a": [1.5, None, True, "x"], "e": {}}, "l": [1, "two", 3.0]}),
 ("{{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{{ range(5, 0, -2)|list }}|{{ dict(a=1, b='x') }}|{{ namespace(a=1).a }}|{% set j = joiner(', ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}", {}),
 ("{{ strftime_now('%Y-%m-%d %H:%M %d %b %Y %A') }}", {}),
 ("{{- ' a ' -}}  b  {{- ' c ' }}  \n  {{ 'd' -}}\n   e", {}),
 ("x\n  {% if true %}\n  y\n  {% endif %}\nz\n    {# comment #}\nw {#- c -#} v\n", {}),
 ("a  {%- if true -%}  b  {%- endif -%}  c\n{% if true %}  d{% endif %}\n  {%+ if true %}e{% endif %}\n{% if true +%}\nf{% endif %}", {}),
 ("line1\n{% for i in [1, 2] %}\n  item {{ i }}\n{% endfor %}\nend\n\n", {}),
 ("{{ 'a' }}  {% if true %}b{% endif %}\n   {{ 'c' }}\n\t{% set x = 1 %}\nd", {}),
 ("{% generation %}gen {{ 1 }}{% endgeneration %}|{%- generation -%} x {%- endgeneration -%}|", {}),
 ("{{ messages[0]['content'] }}|{{ messages[0].content }}|{{ messages|length }}|{{ messages[-1].role }}|{{ (messages|last).content }}|{{ messages[0].missing is defined }}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
 ("{{ x.0 }}|{{ x[1] }}|{{ t['a-b'] }}|{{ (1, 2)[0] }}|{{ [[1, 2]][0][1] }}|{{ 'abc'[0] }}|{{ x[10] is defined }}", {"x": [5, 6], "t": {"a-b": 3}}),
 ("{{ 1 + 2 * 3 - 4 / 2 }}|{{ -2 ** 2 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -x|abs }}|{{ 10 - 2 - 3 }}|{{ 'a' ~ 1 + 2 }}|{{ not true == false }}", {"x": 3}),
 ("{{ \"a\" 'b' }}|{{ 'esc\\x41\\u00e9\\t|' }}|{{ 1_000 }}|{{ 0.5e1 }}|{{ 'multi\nline' }}", {}),
 ("{% if a %}A{% elif b %}B{% else %}C{% endif %}{% if not a and not b %}N{% endif %}", {"a": 0, "b": ""}),
 ("{% set m = {'k': 'v'} %}{{ m.k }}{{ m['k'] }}{% set l = [1, 2] %}{{ l|length }}{{ l.count(1) }}{{ l.index(2) }}", {}),
 ("{{ d['items'] }}|{{ d.items is callable }}|{{ d['get'] is callable }}", {"d": {"items": 5}}),
 ("{{ ' a b '.rsplit(None, 1) }}|{{ ' a b c '.split(None, 1) }}|{{ 'a b'.split(' ', 0) }}", {}),
 ("{{ x }}|{{ y }}", {"x": [1.0, 2.5e-7, 1e22], "y": {"k": None}}),
 ("{% for m in messages %}{{ loop.index }}{% for c in m.content %}{{ loop.index }}{{ c.text|default(c.type) }}{% endfor %}{% endfor %}", {"messages": [{"content": [{"type": "text", "text": "a"}, {"type": "image"}]}]}),
 ("{%- set sys = messages[0].content if messages[0].role == 'system' else 'default' -%}{{ sys }}|{{ messages[1:]|map(attribute='role')|join(' ') }}", {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "u"}]}),
 ("{{ content.split('</think>')[-1].lstrip('\\n') }}|{{ content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"content": "<think>\nplan\n</think>\n\nanswer"}),
 ("{% set reasoning = message.get('reasoning_content', '') %}[{{ reasoning }}]{{ message.get('missing') is none }}", {"message": {"role": "assistant"}}),
 ("{{ 1 if x is string else 2 }}|{{ x is string and x|length > 2 }}", {"x": "abc"}),
 ("{{ t }}|{{ t|tojson }}", {"t": "tab\there \u00e9 \u2028 \x7f \x01"}),
 ("{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
 ("{% macro m(a, b) %}{{ a }}-{{ b }}-{{ varargs }}-{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 2, 3) }}", {}),
 ("{{ 'x' if 0 else 'y' if 1 else 'z' }}|{{ [1, 2, 3][1:]|list }}|{{ ['a']|join(', ') }}", {}),
 ("{{ 'Hello' ~ ' ' ~ name|default('you') ~ '!' }}|{{ ('a' + 'b')|upper }}", {}),
]


def template_error(error):
    """The template line jinja2 reports for an exception (syntax errors carry it, others in the traceback)."""
    line = getattr(error, "lineno", None)
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return {"error_line": line, "error_type": type(error).__name__, "error_message": str(error)}


def jsonable(value):
    return json.loads(json.dumps(value, ensure_ascii=False))


def render_conversation(template_text, messages, add_generation_prompt, kwargs):
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER_FILE), bos_token="<s>", eos_token="</s>",
                                        chat_template=template_text)
    _captured.clear()
    case = {}
    try:
        case["expected"] = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                         tokenize=False, **kwargs)
    except Exception as error:  # the fixture records what transformers raised
        case.update(template_error(error))
    context = _captured.get("context")
    if context is None:  # the template did not compile: record what would have been passed
        context = {"messages": messages, "add_generation_prompt": add_generation_prompt, **kwargs}
    return {"context": jsonable(context), **case}


def render_snippet(text, context):
    try:
        return {"expected": _compile(text).render(**context)}
    except Exception as error:
        return template_error(error)


def main():
    cases = []
    for path in sorted(TEMPLATE_DIR.glob("*.jinja")):
        text = path.read_text()
        for name, (messages, add_generation_prompt, kwargs) in CONVERSATIONS.items():
            if path.name.startswith("broken-") and name != "single_user":
                continue  # a template that does not compile fails the same way for every conversation
            case = render_conversation(text, messages, add_generation_prompt, kwargs)
            cases.append({"template": path.name, "name": name, **case})
    snippets = [{"template": text, "context": context, **render_snippet(text, context)} for text, context in SNIPPETS]
    out = {
        "generator": "tools/make_chat_template_golden.py",
        "versions": {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
                     "python": sys.version.split()[0]},
        "now": NOW,
        "timezone": "UTC",
        "cases": cases,
        "snippets": snippets,
    }
    target = TEMPLATE_DIR / "cases.json"
    target.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    errors = sum("error_line" in c for c in cases)
    print(f"{target}: {len(cases)} cases ({errors} errors), {len(snippets)} snippets")


if __name__ == "__main__":
    main()
