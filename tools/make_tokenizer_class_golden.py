#!/usr/bin/env python3
"""Golden cases for the tokenizer class transformers 5 loads: prompt ids exactly as TRL gets them.

transformers' AutoTokenizer picks a tokenizer class from config.json's model_type and the
tokenizer_class of tokenizer_config.json (or config.json); some classes (Qwen2Tokenizer,
GPT2Tokenizer) rebuild their pre-tokenizer, normalizer and decoder from their own definition and
keep only the vocabulary, merges and post-processor of tokenizer.json. TRL tokenizes through
AutoTokenizer, so a tokenizer.json whose pipeline disagrees with its class gives other ids there.

Writes tests/data/tokenizer-classes/: three small byte-level BPE tokenizers trained here with the
tokenizers library, each with a different pre-tokenizer (GPT-2's ByteLevel regex; Qwen2's Split regex
with NFC; Llama 3's Split regex with ignore_merges and a BOS post-processor), placed in directories
whose config.json / tokenizer_config.json name the families rayless loads (qwen2, qwen3, llama,
mistral) and the tokenizer classes public checkpoints name. Some directories agree with their class,
some disagree. cases.json holds, for each directory, the class transformers loaded and, per plain
text, tokenizer(text)["input_ids"], and per conversation (conversations.json) the text and ids of
apply_chat_template(messages, add_generation_prompt=True, tokenize=True). The chat template is our own
ChatML; the corpus is our own text.

Not needed by CI (the fixtures are committed). To regenerate (deterministic):
    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install transformers==5.24.0 tokenizers==0.23.3 jinja2
    /tmp/venv-tok/bin/python tools/make_tokenizer_class_golden.py
"""
import json
import os
import re
import shutil

import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizer-classes")

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"]
VOCAB_SIZE = 420

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def corpus():
    """Numbers in every position (digits are where the pre-tokenizers part ways), contractions,
    whitespace runs, code, accented and CJK text."""
    pieces = [
        "In 2017 there were 365 days, and 17 of them were cold. Call 555-0123 at 9:45.",
        "It's true that we'll go; they've said I'm late and you'd agree. DON'T SHOUT!",
        "def area(r):\n    return 3.14159 * r ** 2\n\nfor i in range(100):\n\tprint(i, area(i))\n",
        "Le café coûte 3 euros; ça va très bien. Naïve façade, déjà vu.",
        "我们有123个苹果和45个梨。今天是2024年。",
        "   leading spaces\n\n\nnewlines\r\n\ttabs    and   runs   of 1000000 items",
        "What is 12+34? The answer is 46. And 7*8 = 56, 99/3 = 33.",
    ]
    return pieces * 25


def train(style):
    tok = Tokenizer(models.BPE())
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT if style == "qwen2" else LLAMA3_SPLIT), behavior="isolated",
                                 invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    if style == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)]),
        ])
    text = json.loads(tok.to_str())
    if style == "llama3":
        text["model"]["ignore_merges"] = True  # as Llama 3's tokenizer.json has it
    return text


# (directory, config.json model_type or None for no config.json, tokenizer_config.json keys, tokenizer.json
# pipeline, extra config.json keys)
DIRECTORIES = [
    # the case: a GPT-2-regex tokenizer under model_type qwen2 (Qwen2Tokenizer replaces the regex)
    ("qwen2-gpt2-pipeline", "qwen2", {"tokenizer_class": "Qwen2Tokenizer"}, "gpt2", {}),
    # released Qwen2 / Qwen2.5 style: tokenizer.json equals the class definition
    ("qwen2-own-pipeline", "qwen2", {"tokenizer_class": "Qwen2Tokenizer"}, "qwen2", {}),
    # DeepSeek-R1-Distill-Qwen style: LlamaTokenizerFast named, Qwen2Tokenizer loaded (its BOS post-processor kept)
    ("qwen2-llama-class", "qwen2", {"tokenizer_class": "LlamaTokenizerFast"}, "llama3", {}),
    # any other class under qwen2 is replaced too; a prefix space from tokenizer_config.json goes into the class
    ("qwen2-fast-class-prefix-space", "qwen2", {"tokenizer_class": "PreTrainedTokenizerFast",
                                                "add_prefix_space": True}, "gpt2", {}),
    # Qwen3 names Qwen2Tokenizer(Fast): the class
    ("qwen3-qwen2-class", "qwen3", {"tokenizer_class": "Qwen2TokenizerFast"}, "gpt2", {}),
    # ... but under qwen3 PreTrainedTokenizerFast keeps tokenizer.json (extra special tokens added)
    ("qwen3-fast-class", "qwen3", {"tokenizer_class": "PreTrainedTokenizerFast",
                                   "additional_special_tokens": ["<|tool|>"]}, "gpt2", {}),
    # no class named: the model type's (Qwen2Tokenizer); the class's default specials are added
    ("qwen3-no-class", "qwen3", {}, "llama3", {}),
    # Llama 3 style: PreTrainedTokenizerFast, tokenizer.json as it is
    ("llama-fast-class", "llama", {"tokenizer_class": "PreTrainedTokenizerFast"}, "llama3", {}),
    # LlamaTokenizerFast over a byte-level tokenizer.json: transformers loads TokenizersBackend
    ("llama-llama-class", "llama", {"tokenizer_class": "LlamaTokenizerFast"}, "gpt2", {}),
    # SmolLM style: GPT2Tokenizer rebuilds GPT-2's ByteLevel regex (and drops the NFC normalizer)
    ("llama-gpt2-class", "llama", {"tokenizer_class": "GPT2Tokenizer"}, "qwen2", {}),
    # Qwen2Tokenizer named under llama: the class
    ("llama-qwen2-class", "llama", {"tokenizer_class": "Qwen2Tokenizer"}, "gpt2", {}),
    # the class in config.json only, with a prefix space
    ("llama-class-in-config", "llama", {"add_prefix_space": True}, "gpt2", {"tokenizer_class": "GPT2TokenizerFast"}),
    # mistral: TokenizersBackend whatever is named (without mistral-common installed)
    ("mistral-llama-class", "mistral", {"tokenizer_class": "LlamaTokenizerFast"}, "llama3", {}),
    ("mistral-qwen2-class", "mistral", {"tokenizer_class": "Qwen2Tokenizer"}, "gpt2", {}),
    # a tokenizer directory without config.json: tokenizer_config.json's class
    ("no-config-qwen2-class", None, {"tokenizer_class": "Qwen2Tokenizer"}, "gpt2", {}),
]

TEXTS = [
    "In 2017 we had 17 apples and 1234 pears.",
    " I'm sure it's 42, DON'T you think?",
    "x=100000;\n\ty = x * 3.14  \n\n",
    "café 2024年 <|im_end|> <|tool|> tail",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is 17 + 25?"}],
    [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "How many days are in 2024?"}],
    [{"role": "user", "content": "Count: 1 2 3 4 5 6 7 8 9 10"}],
    [{"role": "user", "content": "It's 9:45 and I'll be late. WE'LL SEE."}],
    [{"role": "user", "content": "def f(x):\n    return x ** 2  # square\n\n\nprint(f(12))"}],
    [{"role": "user", "content": "Le café coûte 3 euros."}, {"role": "assistant", "content": "Oui, 3 €."},
     {"role": "user", "content": "Et 12 cafés?"}],
    [{"role": "user", "content": "   spaces   and\ttabs\n\nand 1000000"}],
    [{"role": "user", "content": "我们有123个苹果。"}],
    [{"role": "user", "content": "Phone 555-0123, PIN 0042, year 1999."}],
    [{"role": "user", "content": "no digits at all, only words"}],
]


def ids_view(tokenizer_json):
    """What decides ids in a tokenizer.json: normalizer, pre-tokenizer (without ByteLevel's offsets
    option), BPE options, added tokens."""
    def pre(p):
        if p is None:
            return None
        if p["type"] == "Sequence":
            return [pre(q) for q in p["pretokenizers"]]
        return {k: v for k, v in p.items() if k != "trim_offsets"}
    model = tokenizer_json["model"]
    return (tokenizer_json.get("normalizer"), pre(tokenizer_json.get("pre_tokenizer")),
            bool(model.get("ignore_merges")), bool(model.get("byte_fallback")),
            sorted((a["content"], a["id"]) for a in tokenizer_json.get("added_tokens", [])))


def write_directory(name, model_type, tokenizer_config, pipeline, config_extra, trained):
    path = os.path.join(ROOT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(trained[pipeline], f, ensure_ascii=False, separators=(",", ":"))
    config = {"eos_token": "<|im_end|>", "chat_template": CHATML, **tokenizer_config}
    with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, ensure_ascii=False)
    if model_type is not None:
        with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"model_type": model_type, **config_extra}, f, indent=1)
    return path


def main():
    transformers.logging.set_verbosity_error()
    shutil.rmtree(ROOT, ignore_errors=True)
    os.makedirs(ROOT)
    trained = {style: train(style) for style in ("gpt2", "qwen2", "llama3")}
    with open(os.path.join(ROOT, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(CONVERSATIONS, f, indent=1, ensure_ascii=False)
    directories = []
    for name, model_type, tokenizer_config, pipeline, config_extra in DIRECTORIES:
        path = write_directory(name, model_type, tokenizer_config, pipeline, config_extra, trained)
        tok = AutoTokenizer.from_pretrained(path)
        # as the tokenizer.json alone encodes, to tell directories that agree with their class from others
        raw = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        texts = [{"text": t, "ids": tok(t)["input_ids"]} for t in TEXTS]
        messages = []
        for conversation in CONVERSATIONS:
            text = tok.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
            ids = tok.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, return_dict=False)
            messages.append({"text": text, "ids": ids})
        differ = sum(raw.encode(m["text"], add_special_tokens=False).ids != m["ids"] for m in messages)
        # the pipeline the loaded class runs (the library's own serialization) against the file's
        agrees = ids_view(json.loads(tok.backend_tokenizer.to_str())) == ids_view(trained[pipeline])
        directories.append({"dir": name, "class": type(tok).__name__, "tokenizer_json": pipeline,
                            "tokenizer_json_agrees": agrees,
                            "conversations_differing_from_tokenizer_json": differ,
                            "texts": texts, "conversations": messages})
        print(f"{name}: {type(tok).__name__}, pipeline {'agrees with' if agrees else 'differs from'} tokenizer.json, "
              f"{differ} of {len(messages)} conversations differ from tokenizer.json alone")
    text = json.dumps({"versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
                       "directories": directories}, indent=1, ensure_ascii=False)
    # id lists on one line each: a small file that still diffs line by line
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + ",".join(re.split(r"[,\s]+", m.group(1))) + "]", text)
    with open(os.path.join(ROOT, "cases.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
