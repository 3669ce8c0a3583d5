#!/usr/bin/env python3
"""Makes tests/data/agent/caller/: a tiny Qwen2 model taught one tool-calling dialog, so that the
end-to-end tests see a sampled model call a tool (tests/agent/agent_train.sh).

Asked "What is 2 plus 3?" with the calculator tools of tools/agent_workers/calculator.py in its prompt
(Qwen2.5's template, byte tokenizer), the model writes

    <tool_call>
    {"name": "add", "arguments": {"a": 2, "b": 3}}
    </tool_call><|im_end|>

and after the tool's answer (5) "The answer is 5.<|im_end|>". It is trained here with plain PyTorch
(teacher forcing, cross-entropy on the model's turns only, Adam) until greedy decoding with transformers
writes both turns exactly; at temperature 1 it still writes them almost always.

    .venv-trl/bin/python tools/make_agent_model.py        # needs tests/data/agent/model (make_agent_golden.py)

Deterministic: seeded, one thread.
"""
import importlib.util
import json
import shutil
import types
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOTrainer

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "data" / "agent" / "model"
OUT = ROOT / "tests" / "data" / "agent" / "caller"
QUESTION = "What is 2 plus 3?"
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call><|im_end|>'
ANSWER = "The answer is 5.<|im_end|>"


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(str(SOURCE))
    spec = importlib.util.spec_from_file_location("calculator", ROOT / "tools" / "agent_workers" / "calculator.py")
    calculator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calculator)
    tools = [calculator.add, calculator.multiply, calculator.divide]

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}], tools=tools,
                                           add_generation_prompt=True, tokenize=True, return_dict=False)
    call = tokenizer(CALL, add_special_tokens=False)["input_ids"]
    fake = types.SimpleNamespace(processing_class=tokenizer, _tokenizer=tokenizer, chat_template=None, _is_vlm=False,
                                 chat_template_kwargs={})
    suffix = GRPOTrainer._get_tool_suffix_ids(fake, [{"role": "tool", "name": "add", "content": "5"}])
    answer = tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + call + suffix + answer])
    # the loss: the model's turns only (each position predicts the next token)
    trained = torch.zeros(ids.shape[1], dtype=torch.bool)
    trained[len(prompt):len(prompt) + len(call)] = True
    trained[len(prompt) + len(call) + len(suffix):] = True

    source = json.loads((SOURCE / "config.json").read_text())
    config = Qwen2Config(vocab_size=source["vocab_size"], hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=4096,
                         tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=10000.0, eos_token_id=260,
                         pad_token_id=source["pad_token_id"], bos_token_id=None)
    model = Qwen2ForCausalLM(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    targets = ids[0, 1:][trained[1:]]
    for step in range(2000):
        logits = model(ids).logits[0, :-1][trained[1:]]
        loss = torch.nn.functional.cross_entropy(logits, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 49:
            with torch.no_grad():
                greedy_call = model.generate(torch.tensor([prompt]), max_new_tokens=len(call), do_sample=False)[0, len(prompt):]
                after = prompt + call + suffix
                greedy_answer = model.generate(torch.tensor([after]), max_new_tokens=len(answer), do_sample=False)[0, len(after):]
                probability = torch.exp(-torch.nn.functional.cross_entropy(logits, targets, reduction="sum")).item()
            print(f"step {step + 1}: loss {loss.item():.5f}, p(both turns) {probability:.4f}", flush=True)
            if greedy_call.tolist() == call and greedy_answer.tolist() == answer and probability > 0.98:
                break
    else:
        raise SystemExit("the model did not learn the dialog")

    OUT.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(SOURCE / f, OUT / f)
    config.architectures = ["Qwen2ForCausalLM"]
    (OUT / "config.json").write_text(config.to_json_string())
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, OUT / "model.safetensors", metadata={"format": "pt"})
    (OUT / "dialog.json").write_text(json.dumps({"question": QUESTION, "call": CALL, "answer": ANSWER,
                                                 "prompt_tokens": len(prompt), "final_loss": round(loss.item(), 6)},
                                                indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
