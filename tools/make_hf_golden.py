#!/usr/bin/env python3
"""Golden fixtures for the model module, made with the real libraries.

Writes tests/data/hf-golden/: tiny random Qwen2, Llama and Qwen3 models (transformers), two byte-level
BPE tokenizers trained with the tokenizers library (Qwen2-style split regex and GPT-2-style ByteLevel
regex), and the expected outputs the C++ tests compare against: logits for a left-padded batch,
greedy continuations, logit-processor outputs, token ids of ~200 strings and their decodes.

Not needed by CI (the fixtures are committed). To regenerate, in a separate dev venv:
    python3 -m venv .venv-golden
    .venv-golden/bin/pip install transformers tokenizers safetensors torch==2.13.0
    .venv-golden/bin/python tools/make_hf_golden.py
"""
import json
import os
import random
import shutil

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-golden")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus():
    """Text mixing scripts, emoji, code, numbers and whitespace runs."""
    pieces = [
        "The quick brown fox jumps over the lazy dog. It's 2024; we'll see what they've done!",
        "Le cœur a ses raisons que la raison ne connaît point. Ça va? Très bien, merci.",
        "Съешь же ещё этих мягких французских булок, да выпей чаю.",
        "我能吞下玻璃而不伤身体。今天天气很好，我们去公园吧！",
        "日本語のテキストとカタカナ、ひらがな。東京は大きい。",
        "한국어 문장도 조금 넣어 봅시다. 안녕하세요!",
        "العربية نص قصير للتجربة. مرحبا بالعالم",
        "Ελληνικά: γειά σου κόσμε. हिन्दी में एक वाक्य।",
        "Emoji: 😀😃😄 👍🏽 🇫🇷 👨‍👩‍👧‍👦 ❤️ ✨🚀",
        "def add(a, b):\n    return a + b\n\nfor i in range(10):\n\tprint(i ** 2)  # squares\n",
        "int main() { std::vector<int> v{1, 2, 3}; return v.size() > 2 ? 0 : 1; }",
        "Numbers 3.14159, 2,718 and 1e-9; dates 2023-01-31 and 12:45:00.",
        "   leading spaces\n\n\nmultiple newlines\r\n\twith tabs    and   runs   ",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    ]
    return pieces * 30


def train_tokenizer(style):
    tok = Tokenizer(models.BPE())
    if style == "qwen2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700 if style == "qwen2" else 500, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return tok


def test_strings():
    rng = random.Random(7)
    base = corpus()[:14]
    strings = list(base)
    strings += [
        "", " ", "  ", "\n", "\n\n", " \n ", "\t\t", "a", "A", "hello", " hello", "hello ", "Hello World",
        "don't", "DON'T", "I'M", "you'RE", "it's", "x'y", "'s'", "a  b   c    d", "tail   ", "   head",
        "line1\nline2\r\nline3\rline4", "123", "1234567890", "12.5%", "-42", "$100", "a1b2c3", "١٢٣ ٤٥",
        "naïve café", "straße", "ﬁ ligature", "e\u0301", "Å", "ℕ ⊂ ℝ", "→ ← ↑ ↓", "©®™", "\u00a0nbsp\u00a0",
        "zero\u200bwidth", "😀", "😀😀", " 😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "ok👌ok", "<|im_start|>",
        "<|im_end|>", "<|endoftext|>", "<|im_start|>system\nBe brief.<|im_end|>\n", "a<|im_end|>b",
        "<|im_end|><|im_end|>", "<|im_start", "im_end|>", "<|unknown|>", "<<|im_end|>>", "```python\nx = 1\n```",
        "if (x) {\n  y();\n}", "SELECT * FROM t WHERE a = 'b';", "https://example.com/a?b=c&d=e#f",
        "user@example.com", "C:\\path\\to\\file.txt", "$$\\int_0^1 x^2 dx$$", "((()))[[[]]]{{{}}}",
        "!!!???...", "—–-", "\"quoted\" 'single'", "tab\tseparated\tvalues", "MiXeD CaSe WoRdS",
    ]
    alphabet = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,;:!?'\"\n\t()[]{}<>|_-+=*/\\") + \
        ["é", "ü", "ß", "中", "文", "ж", "я", "😀", "🚀", "’", "“", "”", "…", "\u00a0", "  ", "\n\n"]
    while len(strings) < 200:
        strings.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    return strings


def tokenizer_cases(tok, strings, vocab_size):
    rng = random.Random(11)
    cases = []
    for s in strings:
        ids = tok.encode(s, add_special_tokens=False).ids
        cases.append({"text": s, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    # random id sequences: partial UTF-8 byte sequences exercise the lossy decode
    decodes = []
    for _ in range(40):
        ids = [rng.randrange(vocab_size) for _ in range(rng.randint(1, 12))]
        decodes.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return {"encode": cases, "decode": decodes}


def model_configs(vocab_size, eos_id, pad_id):
    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=0.08, eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None)
    return {
        "qwen2": transformers.Qwen2Config(**common, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True),
        "llama": transformers.LlamaConfig(**common, rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                                          attention_bias=False),
        "qwen3": transformers.Qwen3Config(**{**common, "num_key_value_heads": 1}, head_dim=24, rms_norm_eps=1e-6,
                                          rope_theta=1000000.0, tie_word_embeddings=True),
    }


def left_padded_batch(vocab_size, pad_id, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = [7, 12, 4]
    width = max(lengths)
    ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = torch.randint(0, vocab_size - 3, (n,), generator=g)  # no specials inside prompts
        mask[row, width - n:] = 1
    return ids, mask


def processor_cases(vocab_size):
    """Outputs of transformers' logits processors, applied in generate()'s order."""
    from transformers import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                              TopKLogitsWarper, TopPLogitsWarper)
    g = torch.Generator().manual_seed(5)
    scores = torch.randn(4, vocab_size, generator=g) * 3
    ids = torch.randint(0, vocab_size, (4, 9), generator=g)
    settings = [
        dict(repetition_penalty=1.3, temperature=0.7, top_k=20, top_p=0.9, min_p=0.0),
        dict(repetition_penalty=1.0, temperature=1.0, top_k=0, top_p=0.5, min_p=0.0),
        dict(repetition_penalty=0.8, temperature=1.5, top_k=0, top_p=1.0, min_p=0.1),
        dict(repetition_penalty=1.1, temperature=1.0, top_k=5, top_p=0.95, min_p=0.05),
    ]
    tensors, meta = {"scores": scores.contiguous()}, []
    for k, s in enumerate(settings):
        out = scores.clone()
        if s["repetition_penalty"] != 1.0:
            out = RepetitionPenaltyLogitsProcessor(s["repetition_penalty"])(ids, out)
        if s["temperature"] != 1.0:
            out = TemperatureLogitsWarper(s["temperature"])(ids, out)
        if s["top_k"] > 0:
            out = TopKLogitsWarper(s["top_k"])(ids, out)
        if s["top_p"] < 1.0:
            out = TopPLogitsWarper(s["top_p"])(ids, out)
        if s["min_p"] > 0.0:
            out = MinPLogitsWarper(s["min_p"])(ids, out)
        tensors[f"processed_{k}"] = out.contiguous()
        meta.append(s)
    return tensors, {"ids": ids.tolist(), "settings": meta}


def main():
    if os.path.exists(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    strings = test_strings()
    summary = {"transformers": transformers.__version__, "torch": torch.__version__}
    for style in ["qwen2", "gpt2"]:
        tok = train_tokenizer(style)
        tok.save(os.path.join(ROOT, f"tokenizer-{style}.json"))
        with open(os.path.join(ROOT, f"tokenizer-{style}-cases.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_cases(tok, strings, tok.get_vocab_size()), f, ensure_ascii=False, indent=0)

    tok = Tokenizer.from_file(os.path.join(ROOT, "tokenizer-qwen2.json"))
    vocab_size = tok.get_vocab_size()
    eos_id, pad_id = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    for k, (name, config) in enumerate(model_configs(vocab_size, eos_id, pad_id).items()):
        torch.manual_seed(100 + k)
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
        out_dir = os.path.join(ROOT, name)
        # llama is written in shards to exercise model.safetensors.index.json
        model.save_pretrained(out_dir, max_shard_size="200KB" if name == "llama" else "50MB")
        ids, mask = left_padded_batch(vocab_size, pad_id, seed=k)
        cumsum_positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        with torch.no_grad():
            logits_mask_positions = model(input_ids=ids, attention_mask=mask, position_ids=cumsum_positions).logits
            logits_default = model(input_ids=ids, attention_mask=mask).logits  # what a plain forward does
            greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                    eos_token_id=eos_id, pad_token_id=pad_id, top_k=None, top_p=None,
                                    temperature=None)
        save_file({"logits": logits_mask_positions.contiguous(), "logits_default_positions": logits_default.contiguous()},
                  os.path.join(ROOT, f"{name}-expected.safetensors"))
        with open(os.path.join(ROOT, f"{name}-expected.json"), "w") as f:
            json.dump({"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                       "greedy_completion": greedy[:, ids.shape[1]:].tolist(), "eos_id": eos_id, "pad_id": pad_id}, f)
    tensors, meta = processor_cases(vocab_size)
    save_file(tensors, os.path.join(ROOT, "processors.safetensors"))
    with open(os.path.join(ROOT, "processors.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(ROOT, "versions.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
