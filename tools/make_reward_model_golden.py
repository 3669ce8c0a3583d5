#!/usr/bin/env python3
"""Golden fixture for reward models (sequence classification), made with the real libraries.

Writes tests/data/reward-model/: tiny random Qwen2ForSequenceClassification and
LlamaForSequenceClassification models (num_labels=1, float32, config.json + model.safetensors, the
Qwen2-style tokenizer of tests/data/hf-golden as tokenizer.json plus a tokenizer_config.json naming the
pad and eos tokens), and cases.json: (prompt, completion) pairs with their token ids and the scores
transformers gives, computed the way TRL's GRPOTrainer scores a reward model on plain-text prompts:
    texts = [prompt + completion]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    scores = model(**inputs).logits[:, 0]
and the same scores computed one text at a time (batch of 1).
The Qwen2 directory also carries a chat template of its own (ours, ChatML-like with a default system
turn), and conversation_cases holds conversational rows scored as TRL scores them:
    texts = [trl.data_utils.apply_chat_template({"messages": prompt + [assistant completion]}, tokenizer)["text"]]
then tokenized and scored as above (the Llama directory has no template).

Not needed by CI (the fixture is committed). Seeds are fixed: regenerating gives byte-identical files.
To regenerate, in a separate dev venv:
    python3 -m venv .venv-golden
    .venv-golden/bin/pip install transformers tokenizers safetensors torch==2.13.0
    .venv-golden/bin/python tools/make_reward_model_golden.py
"""
import inspect
import json
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "tests", "data", "reward-model")
TOKENIZER_JSON = os.path.join(HERE, "..", "tests", "data", "hf-golden", "tokenizer-qwen2.json")
PAD_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_end|>"
INIT_STD = 0.2  # larger than transformers' default so that scores are not all ~0
# the Qwen2 reward model's own template: a default system turn, then ChatML-like turns
RM_TEMPLATE = ("{%- if messages[0].role != 'system' %}{{- '<|im_start|>system\\nJudge the reply.<|im_end|>\\n' }}{%- endif %}"
               "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>\\n' }}{%- endfor %}"
               "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
CONVERSATIONS = [
    ([{"role": "user", "content": "What is 2+2?"}], " 4"),
    ([{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Say hi."}], "Hello there!  "),
    ([{"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Apple."},
      {"role": "user", "content": "Another?"}], "Pear, or perhaps a plum."),
]

CASES = [
    ("What is 2+2?", " 4"),
    ("What is 2+2?", " The answer is four, because two plus two makes four."),
    ("Write a haiku about the sea.", ""),  # empty completion: the score is read at the prompt's last token
    ("Translate to French: good morning", " Bonjour, ça va? Très bien, merci."),
    ("Say something in Chinese.", " 我能吞下玻璃而不伤身体。😀"),
    ("def add(a, b):\n", "    return a + b\n"),
    ("Q", " A"),
    ("List three colours, one per line.\n", "red\ngreen\nblue\n\nThat's all   the colours I know; 12.5% of them."),
]


def model_configs(vocab_size, eos_id, pad_id):
    common = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  initializer_range=INIT_STD, eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None,
                  tie_word_embeddings=False, num_labels=1)
    return {
        "qwen2": (transformers.Qwen2ForSequenceClassification,
                  transformers.Qwen2Config(**common, rms_norm_eps=1e-6, rope_theta=10000.0)),
        "llama": (transformers.LlamaForSequenceClassification,
                  transformers.LlamaConfig(**common, rms_norm_eps=1e-5, rope_theta=500000.0, attention_bias=False)),
    }


def init_weights(model):
    """Normal(0, INIT_STD) on every matrix and bias; RMSNorm scales 1 + Normal(0, INIT_STD)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + INIT_STD * torch.randn_like(p))
            else:
                p.normal_(0.0, INIT_STD)


def save_model(model, out_dir):
    kwargs = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True  # transformers < 5; 5.x always writes safetensors
    model.save_pretrained(out_dir, **kwargs)


def write_tokenizer(out_dir, chat_template=None):
    shutil.copyfile(TOKENIZER_JSON, os.path.join(out_dir, "tokenizer.json"))
    # same keys rayless writes with a checkpoint: names the pad token for AutoTokenizer (TRL pads with it)
    config = {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN, "tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template:
        config["chat_template"] = chat_template
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def score(model, tokenizer, texts):
    """TRL GRPOTrainer's reward-model scoring of plain-text prompts."""
    inputs = tokenizer(texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False)
    with torch.no_grad():
        return model(**inputs).logits[:, 0].float(), inputs


def main():
    # remove only what this script writes: README.md stays
    for name in ["qwen2", "llama"]:
        shutil.rmtree(os.path.join(ROOT, name), ignore_errors=True)
    if os.path.exists(os.path.join(ROOT, "cases.json")):
        os.remove(os.path.join(ROOT, "cases.json"))
    os.makedirs(ROOT, exist_ok=True)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # a fixed reduction order, whatever the machine

    raw = Tokenizer.from_file(TOKENIZER_JSON)
    vocab_size = raw.get_vocab_size()
    eos_id, pad_id = raw.token_to_id(EOS_TOKEN), raw.token_to_id(PAD_TOKEN)

    texts = [p + c for p, c in CASES]
    cases = [{"prompt": p, "completion": c, "text": t} for (p, c), t in zip(CASES, texts)]
    architectures = {}
    for k, (name, (cls, config)) in enumerate(model_configs(vocab_size, eos_id, pad_id).items()):
        torch.manual_seed(200 + k)
        model = cls(config)
        init_weights(model)
        out_dir = os.path.join(ROOT, name)
        save_model(model.to(torch.float32), out_dir)
        write_tokenizer(out_dir, RM_TEMPLATE if name == "qwen2" else None)
        for f in os.listdir(out_dir):
            os.chmod(os.path.join(out_dir, f), 0o644)

        # score from what was written, loaded as TRL loads a reward model and its tokenizer
        model = transformers.AutoModelForSequenceClassification.from_pretrained(
            out_dir, num_labels=1, dtype=torch.float32).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
        assert tokenizer.pad_token_id == pad_id and model.config.pad_token_id == pad_id
        assert type(model) is cls

        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        assert all(pad_id not in row for row in ids), "a text contains the pad token"
        for case, row in zip(cases, ids):
            assert case.setdefault("token_ids", row) == row, "the two directories tokenize differently"

        batched, inputs = score(model, tokenizer, texts)
        assert inputs["input_ids"].shape[1] == max(len(r) for r in ids)
        single = torch.cat([score(model, tokenizer, [t])[0] for t in texts])
        architectures[name] = {
            "dir": name,
            "class": cls.__name__,
            "scores": [float(x) for x in batched],
            "scores_one_at_a_time": [float(x) for x in single],
            "max_abs_diff_batched_vs_one_at_a_time": float((batched - single).abs().max()),
        }

    # conversational rows through the Qwen2 reward model's own template (TRL's reward-model path)
    from trl.data_utils import apply_chat_template
    out_dir = os.path.join(ROOT, "qwen2")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        out_dir, num_labels=1, dtype=torch.float32).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out_dir)
    conv_texts = [apply_chat_template({"messages": p + [{"role": "assistant", "content": c}]}, tokenizer)["text"]
                  for p, c in CONVERSATIONS]
    conv_scores, _ = score(model, tokenizer, conv_texts)
    conversation_cases = [{"messages": p, "completion": c, "text": t, "qwen2_score": float(x)}
                          for (p, c), t, x in zip(CONVERSATIONS, conv_texts, conv_scores)]

    out = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "pad_token_id": pad_id,
        "eos_token_id": eos_id,
        "scoring": ("texts = [prompt + completion]; tokenizer(texts, return_tensors='pt', padding=True, "
                    "padding_side='right', add_special_tokens=False); model(**inputs).logits[:, 0] in float32 "
                    "under torch.no_grad(): the score head on the final hidden state of the rightmost token "
                    "that is not pad_token_id"),
        "cases": cases,
        "architectures": architectures,
        "conversation_cases": conversation_cases,
    }
    with open(os.path.join(ROOT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
