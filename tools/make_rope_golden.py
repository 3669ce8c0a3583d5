#!/usr/bin/env python3
"""Golden fixtures for RoPE scaling types, sliding-window attention and Mistral, made with transformers.

Writes tests/data/hf-golden/rope/: one tiny random model per case (saved by transformers, then reloaded
from disk so that the expected outputs come from the config.json the C++ test reads) and
<case>-expected.json / <case>-expected.safetensors with
  - logits of a left-padded batch whose longest row passes the attention window and the original
    context length (positions from the mask, and positions 0..T-1 as a plain forward uses),
  - greedy continuations from generate() (do_sample=False) long enough to cross them, with the
    log-prob of every chosen token (log_softmax of the raw logits), and the EOS id chosen so that one
    row stops early (finished rows leave rayless' decode batch, which dynamic RoPE must not notice).
Each measurement starts from a freshly loaded model: dynamic RoPE keeps state between forward calls.

The cases are kept tiny (vocab 64, hidden 32, 2 layers, head_dim 16, windows of 4-6 tokens, original
context lengths of 16) so that the fixtures stay a few hundred KB.

Not needed by CI (the fixtures are committed). To regenerate, in a venv with transformers 5.24:
    .venv-trl/bin/python tools/make_rope_golden.py
"""
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "hf-golden", "rope")
VOCAB, PAD_ID = 64, 63
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, initializer_range=0.2, pad_token_id=PAD_ID, bos_token_id=None,
              eos_token_id=None, rms_norm_eps=1e-6)
LOGIT_LENGTHS = [21, 13, 7]        # the logits batch: past every window and original length below
PROMPT_LENGTHS = [11, 14, 6]       # the generation batch: prefill below 16, decoding crosses it
MAX_NEW_TOKENS = 14


def cases():
    """name -> (config, edits of the saved config.json (None deletes a key), what it covers)."""
    return {
        # llama3: original 64 with theta 10000 and head_dim 16 puts frequencies in all three bands
        "llama-llama3": (transformers.LlamaConfig(
            **COMMON, max_position_embeddings=256, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                                 high_freq_factor=4.0, original_max_position_embeddings=64)),
            {}, "llama3 (new spelling rope_parameters)"),
        # dynamic NTK: max_position_embeddings 16 is the original length it scales beyond
        "llama-dynamic": (transformers.LlamaConfig(
            **COMMON, max_position_embeddings=16, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)),
            {"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_theta": 10000.0},
            "dynamic (old spelling rope_scaling.type)"),
        "qwen2-yarn": (transformers.Qwen2Config(
            **COMMON, max_position_embeddings=64, tie_word_embeddings=True,
            rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                 original_max_position_embeddings=16)),
            {"rope_parameters": None,
             "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
             "rope_theta": 10000.0},
            "yarn, attention factor from factor (old spelling rope_scaling.rope_type)"),
        # layer 0 full, layer 1 sliding (max_window_layers 1), and linear RoPE in the new spelling
        "qwen2-window": (transformers.Qwen2Config(
            **COMMON, max_position_embeddings=64, tie_word_embeddings=False, use_sliding_window=True,
            sliding_window=4, max_window_layers=1,
            rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0)),
            {"layer_types": None}, "use_sliding_window + max_window_layers (layer_types derived), linear RoPE"),
        # explicit layer_types (sliding first), yarn with mscale/mscale_all_dim, truncate false, betas
        "qwen3-window": (transformers.Qwen3Config(
            **COMMON, head_dim=16, max_position_embeddings=64, tie_word_embeddings=True, use_sliding_window=True,
            sliding_window=6, layer_types=["sliding_attention", "full_attention"],
            rope_parameters=dict(rope_type="yarn", rope_theta=1000.0, factor=4.0, original_max_position_embeddings=16,
                                 mscale=1.0, mscale_all_dim=0.5, beta_fast=8.0, beta_slow=2.0, truncate=False)),
            {}, "layer_types, yarn with mscale/mscale_all_dim/beta/truncate"),
        "mistral-window": (transformers.MistralConfig(
            **COMMON, max_position_embeddings=64, tie_word_embeddings=False, sliding_window=5,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
            {}, "MistralForCausalLM, sliding_window on every layer"),
    }


def left_padded(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(lengths), width), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = torch.randint(0, VOCAB - 2, (n,), generator=g)
        mask[row, width - n:] = 1
    return ids, mask


def fresh(out_dir):
    return transformers.AutoModelForCausalLM.from_pretrained(out_dir, attn_implementation="eager",
                                                             dtype=torch.float32).eval()


def greedy(out_dir, ids, mask, eos_id):
    with torch.no_grad():
        out = fresh(out_dir).generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW_TOKENS,
                                      do_sample=False, eos_token_id=eos_id, pad_token_id=PAD_ID, top_k=None,
                                      top_p=None, temperature=None, return_dict_in_generate=True,
                                      output_logits=True)
    tokens = out.sequences[:, ids.shape[1]:]
    logits = torch.stack(out.logits, 1)  # [B, N, V] raw
    logprobs = logits.log_softmax(-1).gather(2, tokens.unsqueeze(2)).squeeze(2)
    return tokens, logprobs


def choose_eos(tokens):
    """A token that first appears mid-way in exactly one row and never in the others, so that row stops
    early while the others keep going; rows with longer prompts first, as the longest row sets dynamic
    RoPE's length (None when there is no such token)."""
    rows = tokens.tolist()
    for r in sorted(range(len(rows)), key=lambda r: -PROMPT_LENGTHS[r]):
        row = rows[r]
        for step in range(1, MAX_NEW_TOKENS - 3):
            t = row[step]
            if t in row[:step] or any(t in other for k, other in enumerate(rows) if k != r):
                continue
            return t
    return None


def make_case(name, config, edits, k):
    torch.manual_seed(300 + k)
    out_dir = os.path.join(ROOT, name)
    transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").save_pretrained(out_dir)
    if edits:  # e.g. the same RoPE in the spelling older checkpoints use
        path = os.path.join(out_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        for key, value in edits.items():
            if value is None:
                saved.pop(key)
            else:
                saved[key] = value
        with open(path, "w") as f:
            json.dump(saved, f, indent=2)
    ids, mask = left_padded(LOGIT_LENGTHS, seed=k)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        logits = fresh(out_dir)(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        logits_default = fresh(out_dir)(input_ids=ids, attention_mask=mask).logits
    prompt_ids, prompt_mask = left_padded(PROMPT_LENGTHS, seed=100 + k)
    tokens, _ = greedy(out_dir, prompt_ids, prompt_mask, eos_id=None)
    eos_id = choose_eos(tokens)
    if eos_id is None:
        eos_id = VOCAB - 1  # the pad id, never generated here
    tokens, logprobs = greedy(out_dir, prompt_ids, prompt_mask, eos_id=eos_id)
    save_file({"logits": logits.contiguous(), "logits_default_positions": logits_default.contiguous(),
               "greedy_logprobs": logprobs.contiguous()}, os.path.join(ROOT, f"{name}-expected.safetensors"))
    return {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "prompt_ids": prompt_ids.tolist(),
            "prompt_mask": prompt_mask.tolist(), "greedy_completion": tokens.tolist(), "eos_id": eos_id,
            "pad_id": PAD_ID, "max_new_tokens": MAX_NEW_TOKENS}


def main():
    if os.path.exists(ROOT):
        shutil.rmtree(ROOT)
    os.makedirs(ROOT)
    summary = {"transformers": transformers.__version__, "torch": torch.__version__, "cases": {}}
    for k, (name, (config, edits, covers)) in enumerate(cases().items()):
        expected = make_case(name, config, edits, k)
        with open(os.path.join(ROOT, f"{name}-expected.json"), "w") as f:
            json.dump(expected, f)
        summary["cases"][name] = covers
    with open(os.path.join(ROOT, "versions.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
