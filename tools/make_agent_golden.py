#!/usr/bin/env python3
"""Regenerates the tool-calling fixtures in tests/data/agent/ from TRL 1.16 and transformers.

Run from the repository root in the reference environment (the versions of tools/trl_steps/setup_venv.sh):

    .venv-trl/bin/python tools/make_agent_golden.py

It writes:
  templates/*.jinja   chat templates as TRL 1.16 ships them (trl/chat_templates/): the families whose tool
                      calls TRL parses, and ones it refuses or rewrites
  chat/, chat-eos/    tokenizer directories for the template tests: the byte tokenizer of
                      tests/data/trl-steps/model with bos <|bos|>, pad <|pad|> and eos <|im_end|> (chat/) or
                      <|eos|> (chat-eos/: the tool-result tokens are then cut elsewhere)
  model/              the tiny Qwen2 model of tests/data/trl-steps/model with a tool-calling chat template
                      (Qwen2.5's), eos_token <|im_end|> as a Qwen instruct model ships, and max_position_embeddings
                      4096 (room for prompts that list tools): the model of the agent tests and the tool parity cases
  schemas.json        transformers' get_json_schema of tests/data/agent/schema_functions.py and of the example
                      tools and environment in tools/agent_workers/
  golden.json         what TRL and transformers do with those templates: supports_tool_calling and
                      is_chat_template_prefix_preserving, prompts rendered with tools (text and ids),
                      tool-result tokens (_get_tool_suffix_ids) and parsed completions (parse_response)

Running it twice gives identical files.
"""
import importlib.util
import json
import shutil
import sys
import types
from pathlib import Path

import transformers
import trl
import trl.chat_template_utils as ctu
from transformers import PreTrainedTokenizerFast
from transformers.utils import get_json_schema
from trl import GRPOTrainer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "agent"
SOURCE_MODEL = ROOT / "tests" / "data" / "trl-steps" / "model"
TEMPLATES = ["qwen2_5", "qwen3", "qwen3_training", "qwen3_instruct_2507", "llama3_1", "llama3_2", "llama3",
             "qwen3_5_nothink"]


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tokenizer(eos: str, template: str | None = None):
    tok = PreTrainedTokenizerFast(tokenizer_file=str(SOURCE_MODEL / "tokenizer.json"), bos_token="<|bos|>",
                                  eos_token=eos, pad_token="<|pad|>")
    tok.chat_template = template
    return tok


def write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    template_dir = Path(ctu.__file__).parent / "chat_templates"
    (OUT / "templates").mkdir(parents=True, exist_ok=True)
    templates = {}
    for name in TEMPLATES:
        templates[name] = (template_dir / f"{name}.jinja").read_text()
        (OUT / "templates" / f"{name}.jinja").write_text(templates[name])

    # the template tests' tokenizer directories
    for directory, eos in (("chat", "<|im_end|>"), ("chat-eos", "<|eos|>")):
        chat = OUT / directory
        chat.mkdir(exist_ok=True)
        shutil.copy(SOURCE_MODEL / "tokenizer.json", chat / "tokenizer.json")
        write_json(chat / "tokenizer_config.json", {"bos_token": "<|bos|>", "eos_token": eos, "pad_token": "<|pad|>",
                                                     "tokenizer_class": "PreTrainedTokenizerFast"})
    # the agent tests' model
    model = OUT / "model"
    model.mkdir(exist_ok=True)
    for f in ("generation_config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(SOURCE_MODEL / f, model / f)
    # room for a prompt that lists tools (~1500 byte tokens) and a few turns: TRL stops a rollout whose
    # conversation reaches max_position_embeddings
    config = json.loads((SOURCE_MODEL / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    write_json(model / "config.json", config)
    write_json(model / "tokenizer_config.json", {"eos_token": "<|im_end|>", "pad_token": "<|pad|>",
                                                  "tokenizer_class": "PreTrainedTokenizerFast"})
    (model / "chat_template.jinja").write_text(templates["qwen2_5"])

    # schemas
    schema_functions = load(OUT / "schema_functions.py", "schema_functions")
    calculator = load(ROOT / "tools" / "agent_workers" / "calculator.py", "calculator")
    guess = load(ROOT / "tools" / "agent_workers" / "guess_number.py", "guess_number")
    calculator_tools = [calculator.add, calculator.multiply, calculator.divide]
    schemas = {
        "functions": {f.__name__: get_json_schema(f) for f in schema_functions.FUNCTIONS},
        "calculator": [get_json_schema(f) for f in calculator_tools],
        "guess_number": [get_json_schema(guess.GuessNumber().guess)],
    }
    write_json(OUT / "schemas.json", schemas)

    golden = {"versions": {"trl": trl.__version__, "transformers": transformers.__version__},
              "checks": {}, "prompts": [], "suffixes": [], "parses": []}
    for name in TEMPLATES:
        tok = tokenizer("<|im_end|>", templates[name])
        try:
            supports = ctu.supports_tool_calling(tok)
        except Exception as e:  # noqa: BLE001 - what TRL would raise
            supports = f"error: {type(e).__name__}"
        try:
            preserving = ctu.is_chat_template_prefix_preserving(tok)
        except Exception as e:  # noqa: BLE001
            preserving = f"error: {type(e).__name__}"
        golden["checks"][name] = {"supports_tool_calling": supports, "prefix_preserving": preserving}

    conversations = [
        [{"role": "user", "content": "What is 3 + 4?"}],
        [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Multiply 2.5 by 4."}],
    ]
    for name in ("qwen2_5", "qwen3_instruct_2507", "llama3_1", "llama3_2"):
        tok = tokenizer("<|im_end|>", templates[name])
        for tools_name, tools in (("calculator", calculator_tools), ("none", None)):
            for messages in conversations:
                text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
                ids = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True,
                                              return_dict=False)
                golden["prompts"].append({"template": name, "tools": tools_name, "messages": messages,
                                          "text": text, "ids": ids})

    tool_message_sets = [
        [{"role": "tool", "name": "add", "content": "7"}],
        [{"role": "tool", "name": "add", "content": "7"}, {"role": "tool", "name": "multiply", "content": "10.0"}],
        [{"role": "tool", "name": "divide", "content": "{'error': 'division by zero'}"}],
    ]
    for name, eos in (("qwen2_5", "<|im_end|>"), ("qwen2_5", "<|eos|>"), ("llama3_1", "<|im_end|>"),
                      ("qwen3_instruct_2507", "<|im_end|>")):
        tok = tokenizer(eos, templates[name])
        fake = types.SimpleNamespace(processing_class=tok, _tokenizer=tok, chat_template=None, _is_vlm=False,
                                     chat_template_kwargs={})
        for messages in tool_message_sets:
            golden["suffixes"].append({"template": name, "eos_token": eos, "tool_messages": messages,
                                       "ids": GRPOTrainer._get_tool_suffix_ids(fake, messages)})

    qwen_cases = [
        ("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "The answer is 7.<|im_end|>"),
        ("<|im_start|>assistant\n", 'Let me add. <tool_call>\n{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n<tool_call>\n{"name": "multiply", "arguments": {"a": 2, "b": 3.5}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<think>\nI should add.\n</think>\n\n<tool_call>\n{"name": "add", "arguments": {"a": 5, "b": 6}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add", "arguments": {"a": 3,}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add", "arguments": {"a": "3", "b": "4.0"}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "multiply", "arguments": {"a": "2.5", "b": "x"}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add"}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": 5, "arguments": {}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b"'),
        ("<|im_start|>assistant\n", 'Before <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call> and after<|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'),
        ("<|im_start|>assistant\n", '<tool_call>hello</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", 'Straight to it: 12<|im_end|>'),
        ("<|im_start|>assistant\n", 'Ünïcödé ✓ <tool_call>\n{"name": "unknown_tool", "arguments": {"q": "é"}}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1}"}\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", '<tool_call>\n["add", 1]\n</tool_call><|im_end|>'),
        ("<|im_start|>assistant\n", 'no end at all'),
        ("", '   <|im_end|>'),
    ]
    llama_cases = [
        ("<|start_header_id|>assistant<|end_header_id|>\n\n", '{"name": "add", "parameters": {"a": 3, "b": 4}}<|eot_id|>'),
        ("<|start_header_id|>assistant<|end_header_id|>\n\n", 'Hello there.<|eot_id|>'),
        ("<|start_header_id|>assistant<|end_header_id|>\n\n", '{"name": "add", "parameters": {"a": 3, }}<|eot_id|>'),
        ("<|start_header_id|>assistant<|end_header_id|>\n\n", 'Let me call it: {"name": "multiply", "parameters": {"a": "2", "b": 5}}<|eot_id|>'),
        ("<|start_header_id|>assistant<|end_header_id|>\n\n", '{"name": "add", "parameters": {"a": 1, "b": 2}}'),
    ]
    for family, template, cases in (("qwen", "qwen2_5", qwen_cases), ("llama3", "llama3_1", llama_cases)):
        for eos in ("<|im_end|>", "<|eos|>"):
            tok = tokenizer(eos, templates[template])
            ctu.add_response_schema(tok)
            for prefix, text in cases:
                prefix_ids = tok(prefix, add_special_tokens=False)["input_ids"]
                ids = tok(text, add_special_tokens=False)["input_ids"]
                parsed = ctu.parse_response(tok, ids, prefix=prefix_ids, tools=calculator_tools)
                golden["parses"].append({"format": family, "eos_token": eos, "prefix_ids": prefix_ids, "ids": ids,
                                         "text": text, "parsed": parsed})
    write_json(OUT / "golden.json", golden)
    print(f"wrote {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
