#!/usr/bin/env python3
"""Peak RSS and start-up time of `rayless train` against the size of its prompt dataset (issue 51).

For each size it writes a JSONL of that many rows (short math problems with an answer, about 60 bytes a
row), then runs a 1-step `rayless train` on the embedded tiny model under mpirun twice: a first start,
which builds the byte-offset index and checks every row, and a second, which reuses both. It reads
the start-up line ("N prompts (read and checked in S s; ...)" / "(opened in S s; ...)") and
memory/peak_rss_mb (the largest over ranks) from metrics.jsonl. RSS growth per row is taken against
the smallest size. --baseline RAYLESS runs another binary (e.g. main's, which holds every row) the
same way for comparison.

  tools/bench/dataset_scale.py --rayless build/rayless --sizes 10000,1000000,10000000 --np 2
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_dataset(path, rows):
    with open(path, "w") as out:
        chunk = []
        for i in range(rows):
            a, b = i % 997, (i * 7919) % 1009
            chunk.append('{"prompt": "Problem %d: what is %d + %d?", "answer": "%d"}\n' % (i, a, b, a + b))
            if len(chunk) == 100000:
                out.write("".join(chunk))
                chunk = []
        out.write("".join(chunk))


def run_train(rayless, data, output, np, extra):
    cmd = ["mpirun", "-np", str(np), "--oversubscribe", "--bind-to", "none", rayless, "train",
           "--config", os.path.join(ROOT, "configs/ci-small.toml"), "--output", output,
           "--set", 'data.path="%s"' % data, "--set", "train.max_steps=1", "--set", "grpo.num_iterations=1",
           "--set", "grpo.steps_per_generation=1", "--set", "log.console=false",
           "--set", "checkpoint.save_steps=0"] + extra
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit("dataset_scale: %s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode, proc.stderr[-3000:]))
    text = proc.stdout + proc.stderr
    found = re.search(r"(\d+) prompts \((read and checked|opened) in ([0-9.]+) s", text)
    if not found:
        found = re.search(r"(\d+) prompts \(read and checked in ([0-9.]+) s\)", text)  # older binaries
        data_s, how = float(found.group(2)), "read and checked"
    else:
        data_s, how = float(found.group(3)), found.group(2)
    with open(os.path.join(output, "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    return {"data_s": data_s, "how": how, "wall_s": round(wall, 2), "peak_rss_mb": metrics[-1]["memory/peak_rss_mb"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rayless", required=True)
    parser.add_argument("--baseline", help="another rayless binary, run the same way (first start only)")
    parser.add_argument("--sizes", default="10000,1000000,10000000")
    parser.add_argument("--baseline-max-rows", type=int, default=1000000,
                        help="sizes above this are not run with --baseline (it holds every row)")
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--work", help="directory for the datasets and runs (default: a temporary one, removed)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = args.work or tempfile.mkdtemp(prefix="rayless-dataset-scale.")
    os.makedirs(work, exist_ok=True)
    results = []
    try:
        for rows in sizes:
            data = os.path.join(work, "prompts-%d.jsonl" % rows)
            write_dataset(data, rows)
            shutil.rmtree(os.path.join(work, ".rayless-index"), ignore_errors=True)
            entry = {"rows": rows, "file_mb": round(os.path.getsize(data) / 2**20, 1)}
            for name in ("first", "second"):
                out = os.path.join(work, "run-%d-%s" % (rows, name))
                shutil.rmtree(out, ignore_errors=True)
                entry[name] = run_train(args.rayless, data, out, args.np, [])
                shutil.rmtree(out, ignore_errors=True)
            if args.baseline and rows <= args.baseline_max_rows:
                out = os.path.join(work, "run-%d-baseline" % rows)
                shutil.rmtree(out, ignore_errors=True)
                entry["baseline"] = run_train(args.baseline, data, out, args.np, [])
                shutil.rmtree(out, ignore_errors=True)
            os.remove(data)
            results.append(entry)
            print(json.dumps(entry), flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    base = results[0]
    print("\n| rows | file | first start: data phase | second start: data phase | peak RSS (max rank) | RSS growth per row |"
          + (" baseline: data phase | baseline: peak RSS |" if args.baseline else ""))
    print("|---|---|---|---|---|---|" + ("---|---|" if args.baseline else ""))
    for r in results:
        grow = "" if r is base else "%.1f B" % ((r["first"]["peak_rss_mb"] - base["first"]["peak_rss_mb"]) * 2**20 /
                                                (r["rows"] - base["rows"]))
        line = "| %d | %.1f MiB | %.2f s (%.2f us/row) | %.2f s (%.3f us/row) | %.0f MiB | %s |" % (
            r["rows"], r["file_mb"], r["first"]["data_s"], r["first"]["data_s"] * 1e6 / r["rows"], r["second"]["data_s"],
            r["second"]["data_s"] * 1e6 / r["rows"], r["first"]["peak_rss_mb"], grow)
        if args.baseline:
            b = r.get("baseline")
            line += (" %.2f s | %.0f MiB |" % (b["data_s"], b["peak_rss_mb"])) if b else " — | — |"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
