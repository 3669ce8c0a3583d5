#!/usr/bin/env python3
"""The training step reads from the device once per optimizer step (issue 48 §3).

On a GPU every read of a device value to the host (.item(), .cpu(), a copy to kCPU, a data pointer)
waits for all queued kernels. The functions a micro-step and an optimizer step run hold none: their
values are added to the step's StepRead (src/trainer/step_read.cpp), whose values() is the one read,
called once, in Trainer::finish_optimizer_step. A read of a tensor that is on the host already is
allowed where the line, or the one above it, says "host tensor". The entropy mask's count exchange
(Trainer::entropy_mask_of, the seed's design) is the documented exception and is not scanned.

usage: step_reads_once.py SOURCE_DIR
Seen failing on main before issue 48 §3 (loss metrics, sum_of_squares, the guard's flags and the
clip coefficient each read to the host).
"""
import re
import sys
from pathlib import Path

# (file, function) pairs: every function the step runs between backward and the optimizer update
STEP_FUNCTIONS = [
    ("src/grpo/loss.cpp", "compute_loss"),
    ("src/grpo/loss.cpp", "add_loss_metrics"),
    ("src/trainer/trainer.cpp", "Trainer::train_micro_batch"),
    ("src/trainer/trainer.cpp", "Trainer::finish_optimizer_step"),
    ("src/trainer/step_metrics.cpp", "reduce_loss_metrics"),
    ("src/trainer/step_metrics.cpp", "add_loss_metrics"),
    ("src/trainer/step_metrics.cpp", "loss_metrics_from"),
    ("src/trainer/nonfinite_guard.cpp", "NonfiniteGuard::check"),
    ("src/trainer/nonfinite_guard.cpp", "NonfiniteGuard::note_rows"),
    ("src/trainer/nonfinite_guard.cpp", "NonfiniteGuard::reduce_flags"),
    ("src/trainer/optimizer.cpp", "clip_coefficient"),
    ("src/trainer/optimizer.cpp", "clip_by_norm"),
    ("src/trainer/optimizer.cpp", "reduce_gradients"),
    ("src/trainer/optimizer.cpp", "apply_gradients"),
    ("src/trainer/optimizer.cpp", "single_pass_step"),
    ("src/trainer/zero_optimizer.cpp", "ZeroOptimizer::after_backward"),
    ("src/trainer/zero_optimizer.cpp", "ZeroOptimizer::reduce_scatter_gradients"),
    ("src/trainer/zero_optimizer.cpp", "ZeroOptimizer::sum_of_squares"),
    ("src/trainer/zero_optimizer.cpp", "ZeroOptimizer::reduce_gradients"),
    ("src/trainer/zero_optimizer.cpp", "ZeroOptimizer::apply_gradients"),
    ("src/trainer/data_parallel.cpp", "DataParallel::allreduce_gradients"),
    ("src/ops/sum_of_squares.cpp", "sum_of_squares"),
    ("src/ops/adamw_update.cpp", "adamw_update"),
]
READS = re.compile(r"\.item\s*[<(]|\.cpu\(\)|torch::kCPU|\.data_ptr\b|_local_scalar_dense|\.tolist\(")


def function_body(text, name):
    """(first line, body) of the definition of `name`: its argument list closed, then only qualifiers
    (const, override, noexcept) before '{'. Calls and declarations are passed over."""
    pattern = re.compile(r"(?<![\w:])" + re.escape(name) + r"\s*\(")
    for match in pattern.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth > 0:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        after = re.match(r"[\s\w&:]*\{", text[i:])
        if not after:
            continue
        open_brace = i + after.end() - 1
        depth, j = 0, open_brace
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[:match.start()].count("\n") + 1, text[match.start():j + 1]
            j += 1
    return None, None


def main():
    root = Path(sys.argv[1])
    problems, scanned = [], 0
    for rel, name in STEP_FUNCTIONS:
        path = root / rel
        if not path.exists():
            problems.append(f"{rel}: missing")
            continue
        first_line, body = function_body(path.read_text(), name)
        if body is None:
            problems.append(f"{rel}: no definition of {name} (rename it here too)")
            continue
        scanned += 1
        lines = body.split("\n")
        for k, line in enumerate(lines):
            code = line.split("//")[0]
            if READS.search(code) and "host tensor" not in line and (k == 0 or "host tensor" not in lines[k - 1]):
                problems.append(f"{rel}:{first_line + k}: {name} reads a device value: {line.strip()}")
    step = (root / "src/trainer/trainer.cpp").read_text()
    _, finish = function_body(step, "Trainer::finish_optimizer_step")
    if finish is not None and finish.count(".values()") != 1:
        problems.append(f"Trainer::finish_optimizer_step calls StepRead::values() {finish.count('.values()')} times, not once")
    for p in problems:
        print("FAIL", p)
    print(f"{scanned} step functions scanned, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
