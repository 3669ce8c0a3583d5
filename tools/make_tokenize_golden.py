#!/usr/bin/env python3
"""Golden cases for `rayless tokenize`: prompt text and ids exactly as transformers computes them.

Writes tests/data/chat-models/: four tokenizer directories made from the byte-level BPE fixture
tests/data/hf-golden/tokenizer-qwen2.json with extra special tokens, each in a different way of carrying
(or not carrying) its chat template, plus conversations/*.json and cases.json. Each case is a
`rayless tokenize --model <dir> --json` command line (run from tests/data/chat-models) and what
transformers gives for the same input:
  * plain text      -> AutoTokenizer(dir)(text)["input_ids"]   (TRL's tokenizer(text): BOS when the
                        tokenizer.json post-processor adds one)
  * messages        -> apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
                        (TRL's prompt path: the template writes its own BOS; no second one)
  * --no-generation-prompt -> the same with add_generation_prompt=False
  * explicit template + plain text -> the text wrapped as one user message (rayless's own rule, rendered
    by transformers with that template)
The templates are our own, written for these tests in the styles of the public families (Llama 3,
Qwen3, Mistral); they are not copies of any model's template.

Not needed by CI (the fixtures are committed). To regenerate:
    tools/trl_steps/setup_venv.sh          # .venv-trl: transformers 5.24.0, tokenizers 0.23.3
    .venv-trl/bin/python tools/make_tokenize_golden.py
"""
import json
import os
import shutil

import tokenizers
import transformers
from tokenizers import Tokenizer, processors
from transformers import AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "tests", "data", "chat-models")
SOURCE = os.path.join(HERE, "..", "tests", "data", "hf-golden", "tokenizer-qwen2.json")

# Llama-3 style: BOS written by the template, header tokens, a default system message, trimmed content
HEADER_TEMPLATE = """{{- bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "You are a helpful assistant." %}
{%- endif %}
{{- '<|start|>system<|end|>\\n\\n' + system_message + '<|eot|>' }}
{%- for message in messages %}
    {{- '<|start|>' + message['role'] + '<|end|>\\n\\n' + message['content'] | trim + '<|eot|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start|>assistant<|end|>\\n\\n' }}
{%- endif %}
"""

# Qwen3 style: think blocks stripped from earlier assistant turns, a namespace scan for the last user
# turn, reasoning_content, enable_thinking as a kwarg
THINK_TEMPLATE = """{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- set content = m.content if m.content is string else '' %}
    {%- if m.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if m.reasoning_content is string %}
            {%- set reasoning = m.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_user and reasoning %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + m.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# Mistral style: BOS, [INST] blocks, strict user/assistant alternation (raise_exception), EOS after
# assistant turns, the system message folded into the first user turn
INST_TEMPLATE = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- else %}
        {{- ' ' + message['content'] + eos_token }}
    {%- endif %}
{%- endfor %}
"""

# A second named template (tool use): tools as JSON before the conversation
TOOL_TEMPLATE = """{{- bos_token }}
{%- if tools %}
    {{- '[TOOLS]' + tools | tojson + '[/TOOLS]' }}
{%- endif %}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}{{- '[INST] ' + message['content'] + '[/INST]' }}
    {%- else %}{{- message['content'] + eos_token }}{%- endif %}
{%- endfor %}
"""

EXTRA_SPECIALS = ["<|bos|>", "<|start|>", "<|end|>", "<|eot|>", "[INST]", "[/INST]"]
EXTRA_PLAIN = ["<think>", "</think>"]  # added, not special (as Qwen3 has them)

CONVERSATIONS = {
    "single": [{"role": "user", "content": "What is 2+2?"}],
    "system": [{"role": "system", "content": "  Answer briefly.  "}, {"role": "user", "content": "Name a color."}],
    "multi_think": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "<think>\nDivisors: 1 and 7.\n</think>\n\nYes, 7 is prime."},
        {"role": "user", "content": "And 9?"},
    ],
    "extra_keys": [
        {"role": "user", "content": "Hi", "name": None},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "Greet back."},
        {"role": "user", "content": "Bye"},
    ],
    "bad_roles": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}


def make_tokenizer(bos_post_processor):
    tok = Tokenizer.from_file(SOURCE)
    tok.add_special_tokens(EXTRA_SPECIALS)
    tok.add_tokens(EXTRA_PLAIN)
    if bos_post_processor:
        bos = tok.token_to_id("<|bos|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|bos|> $A", pair="<|bos|> $A <|bos|> $B", special_tokens=[("<|bos|>", bos)])
    return tok


def write_dir(name, bos_post_processor, config, files=None):
    path = os.path.join(ROOT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    make_tokenizer(bos_post_processor).save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "TokenizersBackend", **config}, f, indent=1)
    for rel, text in (files or {}).items():
        os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
        with open(os.path.join(path, rel), "w") as f:
            f.write(text)
    return path


def main():
    os.makedirs(os.path.join(ROOT, "conversations"), exist_ok=True)
    for name, messages in CONVERSATIONS.items():
        with open(os.path.join(ROOT, "conversations", name + ".json"), "w") as f:
            json.dump(messages, f, indent=1, ensure_ascii=False)
    with open(os.path.join(ROOT, "tool_template.jinja"), "w") as f:
        f.write(TOOL_TEMPLATE)
    dirs = {
        # template in chat_template.jinja (transformers' own file), BOS also in the post-processor
        "header-jinja-file": write_dir("header-jinja-file", True,
                                       {"bos_token": "<|bos|>", "eos_token": "<|eot|>"},
                                       {"chat_template.jinja": HEADER_TEMPLATE}),
        # template as tokenizer_config.json's string, no BOS anywhere
        "think-config-string": write_dir("think-config-string", False,
                                         {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                                          "chat_template": THINK_TEMPLATE}),
        # named templates (default + tool_use), BOS as an AddedToken object
        "inst-named": write_dir("inst-named", True,
                                {"bos_token": {"content": "<|bos|>", "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True,
                                               "__type": "AddedToken"},
                                 "eos_token": "<|eot|>",
                                 "chat_template": [{"name": "default", "template": INST_TEMPLATE},
                                                   {"name": "tool_use", "template": TOOL_TEMPLATE}]}),
        # no template at all: plain text only
        "no-template": write_dir("no-template", True, {"bos_token": "<|bos|>", "eos_token": "<|eot|>"}),
    }
    cases = []

    def add(dir_name, args, text, ids, kind):
        cases.append({"dir": dir_name, "args": args, "kind": kind, "text": text, "ids": ids})

    texts = ["Hello world", "  leading space and <think>tags</think>\n", "Ça va? 2+2=4 <|bos|>"]
    for dir_name, path in dirs.items():
        tok = AutoTokenizer.from_pretrained(path)
        for text in texts:  # TRL's plain-text prompts: tokenizer(text)
            add(dir_name, ["--text", text], text, tok(text)["input_ids"], "plain text, auto")
        if tok.chat_template is None:
            continue
        kwarg_sets = [{}]
        if dir_name == "think-config-string":
            kwarg_sets.append({"enable_thinking": False})
        for conv, messages in CONVERSATIONS.items():
            if conv == "bad_roles":
                continue
            for kwargs in kwarg_sets:
                for gen in (True, False):
                    try:
                        text = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=False, **kwargs)
                        ids = tok.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True,
                                                      return_dict=False, **kwargs)
                    except Exception as e:  # noqa: BLE001 - recorded as an expected failure
                        print(f"{dir_name}/{conv}: transformers raises {e}; skipped")
                        continue
                    args = ["--messages", f"conversations/{conv}.json"]
                    if kwargs:
                        args += ["--kwargs", json.dumps(kwargs)]
                    if not gen:
                        args += ["--no-generation-prompt"]
                    add(dir_name, args, text, ids, "messages")
        # an explicit template wraps plain text as one user message
        wrapped = [{"role": "user", "content": "Name a fruit."}]
        text = tok.apply_chat_template(wrapped, add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(wrapped, add_generation_prompt=True, tokenize=True, return_dict=False)
        specs = ["default"] + (["header-jinja-file/chat_template.jinja"] if dir_name == "header-jinja-file" else [])
        for spec in specs:
            add(dir_name, ["--text", "Name a fruit.", "--chat-template", spec], text, ids, "explicit template wraps text")
    # a named template and a template file, with tools
    tok = AutoTokenizer.from_pretrained(dirs["inst-named"])
    tools = [{"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                                "parameters": {"type": "object", "properties": {
                                                    "a": {"type": "number"}, "b": {"type": "number"}}}}}]
    for spec in ("tool_use", "tool_template.jinja"):
        text = tok.apply_chat_template(CONVERSATIONS["single"], tools=tools, chat_template=TOOL_TEMPLATE,
                                       add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(CONVERSATIONS["single"], tools=tools, chat_template=TOOL_TEMPLATE,
                                      add_generation_prompt=True, tokenize=True, return_dict=False)
        add("inst-named", ["--messages", "conversations/single.json", "--chat-template", spec,
                           "--kwargs", json.dumps({"tools": tools})], text, ids, "named template / file, tools")
    # errors: exit 2 with one line naming the template source (and its line)
    errors = [
        {"dir": "inst-named", "args": ["--messages", "conversations/bad_roles.json"],
         "error": "tokenizer_config.json \\(chat_template \"default\"\\):[0-9]+: .*alternate user/assistant"},
        {"dir": "no-template", "args": ["--messages", "conversations/single.json"],
         "error": "messages need a chat template"},
        {"dir": "no-template", "args": ["--messages", "conversations/single.json", "--chat-template", "{% if %}"],
         "error": "tokenizer.chat_template \\(inline\\):1: "},
    ]
    for e in errors:
        tok = AutoTokenizer.from_pretrained(dirs[e["dir"]])
        messages = CONVERSATIONS[os.path.basename(e["args"][1])[:-5]]
        try:
            tpl = e["args"][3] if len(e["args"]) > 3 else None
            tok.apply_chat_template(messages, chat_template=tpl, add_generation_prompt=True, tokenize=False)
            raise SystemExit(f"expected transformers to fail on {e}")
        except (ValueError, Exception) as err:  # noqa: BLE001 - transformers fails too: the case stands
            e["transformers_error"] = f"{type(err).__name__}: {err}".splitlines()[0]
    with open(os.path.join(ROOT, "cases.json"), "w") as f:
        json.dump({"versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
                   "cases": cases, "errors": errors}, f, indent=1, ensure_ascii=False)
    print(f"wrote {len(cases)} cases and {len(errors)} error cases to {ROOT}")


if __name__ == "__main__":
    main()
