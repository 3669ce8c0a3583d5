#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus, tests/data/fuzz/corpus/<target>/ (issue 17 §2).

Seeds are small valid inputs (libFuzzer mutates them): copies of the project's own configs, model
configs, tokenizers, chat templates and prompts, plus a few handmade safetensors files, index files
and reward-worker answers. The rollout seeds are step files written by a real `rayless train` run.

usage: tools/fuzz/make_corpus.py [--rayless build/rayless]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "fuzz", "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def copy(target, name, source):
    with open(os.path.join(ROOT, source), "rb") as f:
        put(target, name, f.read())


def safetensors(tensors, metadata=None):
    """tensors: name -> (dtype, shape, raw bytes); the layout of the format's reference writer."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rayless", default=os.path.join(ROOT, "build", "rayless"))
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)

    # safetensors: each dtype, an empty tensor, a scalar, metadata
    f32 = struct.pack("<6f", *[0.5 * i for i in range(6)])
    put("safetensors", "f32-2x3", safetensors({"w": ("F32", [2, 3], f32)}))
    put("safetensors", "mixed", safetensors({"a": ("BF16", [4], b"\x80\x3f" * 4), "b": ("F16", [2, 1], b"\x00\x3c" * 2),
                                              "c": ("F64", [1], struct.pack("<d", 3.25))}, {"format": "pt"}))
    put("safetensors", "empty-and-scalar", safetensors({"e": ("F32", [0, 4], b""), "s": ("F32", [], struct.pack("<f", 1.0))}))
    # hostile shapes (issue 17: refused before any allocation): 2^60 elements in 4 bytes, and a product
    # that overflows 64 bits
    put("safetensors", "shape-2-60", safetensors({"w": ("F32", [1 << 60], struct.pack("<f", 1.0))}))
    put("safetensors", "shape-overflow", safetensors({"w": ("BF16", [1 << 40, 1 << 40], b"\0\0")}))

    # the index of a sharded model; the target's directory holds model-00001-of-00001.safetensors
    shard = "model-00001-of-00001.safetensors"
    put("safetensors_index", "both-in-shard", json.dumps(
        {"metadata": {"total_size": 64}, "weight_map": {"model.embed_tokens.weight": shard, "lm_head.weight": shard}}, indent=2))
    put("safetensors_index", "one-name", json.dumps({"weight_map": {"lm_head.weight": shard}}))

    # model config.json files the tests use (llama, qwen2, qwen3, mistral, RoPE scalings, windows)
    for source in ["configs/models/tiny/config.json", "tests/data/hf-golden/llama/config.json",
                   "tests/data/hf-golden/qwen2/config.json", "tests/data/hf-golden/qwen3/config.json",
                   "tests/data/hf-golden/rope/llama-dynamic/config.json", "tests/data/hf-golden/rope/llama-llama3/config.json",
                   "tests/data/hf-golden/rope/mistral-window/config.json", "tests/data/hf-golden/rope/qwen2-yarn/config.json",
                   "tests/data/hf-golden/rope/qwen3-window/config.json"]:
        copy("model_config", source.replace("/", "_"), source)

    # tokenizers: the tiny BPE (ByteLevel) and a reward model's (Llama-style, metaspace-free)
    copy("tokenizer", "tiny", "configs/models/tiny/tokenizer.json")
    copy("tokenizer", "llama-reward", "tests/data/reward-model/llama/tokenizer.json")
    copy("tokenizer", "qwen2-reward", "tests/data/reward-model/qwen2/tokenizer.json")

    # chat templates (Jinja): every template the chat tests render
    templates = os.path.join(ROOT, "tests", "data", "chat-templates")
    for name in sorted(os.listdir(templates)):
        if name.endswith(".jinja"):
            copy("chat_template", name, os.path.join("tests", "data", "chat-templates", name))
    copy("chat_template", "tool_template.jinja", "tests/data/chat-models/tool_template.jinja")

    # TOML configs: the shipped ones
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        if name.endswith(".toml"):
            copy("toml_config", name, os.path.join("configs", name))

    # JSONL prompt datasets: demo prompts, chat messages, fields the trainer passes on
    with open(os.path.join(ROOT, "data", "demo", "prompts.jsonl")) as f:
        put("jsonl_dataset", "demo-head", "".join(f.readlines()[:8]))
    put("jsonl_dataset", "messages", "\n".join(json.dumps(row) for row in [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "2+2?"}]}], "answer": "4"},
        {"prompt": "Count to 3", "answer": "1 2 3", "weight": 2}]) + "\n")
    put("jsonl_dataset", "question-conversation", '{"question": "Why?"}\n\n{"conversation": [{"role": "user"}]}\n')

    # reward-worker answers: first byte = one request (even) or a batch of 1 + (byte >> 1) % 8 (odd)
    put("worker_reply", "single", b"\x00" + b'{"reward": 0.5}')
    put("worker_reply", "single-null", b"\x00" + b'{"reward": null, "info": "skipped"}')
    put("worker_reply", "batch-3", b"\x05" + b'{"rewards": [1, NaN, -2.5e3]}')
    put("worker_reply", "batch-1-string-nan", b"\x01" + b'{"rewards": ["NaN"]}')

    # rollout step files: one generation of configs/ci-small.toml on one rank, with and without the
    # optional datasets (old_logps and entropies come with μ = 2)
    if not os.path.exists(args.rayless):
        sys.exit(f"make_corpus: {args.rayless} not built (pass --rayless)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in [("mu1", []), ("mu2-entropy", ["--set", "grpo.num_iterations=2", "--set", "grpo.top_entropy_quantile=0.5"])]:
            run = os.path.join(tmp, name)
            subprocess.run([args.rayless, "train", "--config", os.path.join(ROOT, "configs", "ci-small.toml"), "--output", run,
                            "--set", "train.max_steps=1", "--set", "generation.max_completion_length=4",
                            "--set", "checkpoint.save_steps=0"] + extra,
                           check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            with open(os.path.join(run, "rollouts", "rank-00000", "step-00000000.h5"), "rb") as f:
                put("rollout_file", name, f.read())
    for target in sorted(os.listdir(OUT)):
        files = os.listdir(os.path.join(OUT, target))
        print(f"{target}: {len(files)} seeds, {sum(os.path.getsize(os.path.join(OUT, target, f)) for f in files)} bytes")


if __name__ == "__main__":
    main()
