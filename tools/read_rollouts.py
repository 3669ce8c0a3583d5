#!/usr/bin/env python3
"""Read a rayless rollout store with h5py (an example; see docs/rollout-format.md).

    python3 tools/read_rollouts.py runs/demo/rollouts/index.h5          # a summary per step and rank
    python3 tools/read_rollouts.py runs/demo/rollouts/rank-00000.h5 --step 3 --show 2

PATH is index.h5 (every rank through external links), a rank file rank-RRRRR.h5, or a rollouts/
directory. --check-fixture verifies the store written by the C++ test "store: python fixture".
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np


def open_store(path):
    if os.path.isdir(path):
        for candidate in ("index.h5", os.path.join("rollouts", "index.h5")):
            if os.path.exists(os.path.join(path, candidate)):
                return h5py.File(os.path.join(path, candidate), "r")
        raise StoreError(f"{path}: no index.h5 here")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise StoreError(f"{path}: not a readable HDF5 file ({e})")


class StoreError(Exception):
    """A one-line reason the store cannot be read."""


def step_groups(store):
    """(step, rank, group) for every stored step; follows the external links transparently."""
    for name in sorted(store):
        if not name.startswith("step_"):
            continue
        step = int(name[len("step_"):])
        node = store[name]
        if "completion_ids" in node:  # a rank file: the step group itself
            yield step, int(node.attrs["rank"]), node
        else:  # the index: one link per rank
            for rank_name in sorted(node):
                try:
                    group = node[rank_name]
                except KeyError:
                    # a link to a rank that never wrote this step (indexes written before links
                    # followed the files, e.g. after a resume at more ranks): nothing to read
                    print(f"note: {name}/{rank_name}: linked rank file has no such step; skipped", file=sys.stderr)
                    continue
                yield step, int(rank_name[len("rank_"):]), group


def split(flat, offsets):
    """Flat token array + N+1 offsets -> list of N arrays."""
    return [flat[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def summary(step, rank, g):
    rewards = g["rewards"][()]
    lengths = np.diff(g["completion_offsets"][()])
    names = [str(n) for n in g.attrs["reward_names"]]
    per_func = g["rewards_per_func"][()]
    means = ", ".join(f"{n}={np.nanmean(per_func[:, k]):.3f}" for k, n in enumerate(names))
    threshold = g.attrs.get("entropy_threshold", float("nan"))
    print(f"step {step} rank {rank}: {len(rewards)} completions, reward mean {rewards.mean():.4f}, "
          f"mean length {lengths.mean():.1f} tokens, {means}, entropy threshold {threshold}")


def show(g, count):
    prompts = split(g["prompt_ids"][()], g["prompt_offsets"][()])
    completions = split(g["completion_ids"][()], g["completion_offsets"][()])
    # tool-calling runs: who wrote each token (1 = the model) and each completion's conversation
    masks = split(g["tool_mask"][()], g["completion_offsets"][()]) if "tool_mask" in g else None
    conversations = [json.loads(c) for c in g["conversations"].asstr()[()]] if "conversations" in g else None
    for i in range(min(count, len(completions))):
        print(f"  [{i}] group {g['group_index'][i]} reward {g['rewards'][i]:.4f} "
              f"advantage {g['advantages'][i]:.4f}\n      prompt ids {prompts[i].tolist()}\n"
              f"      completion ids {completions[i].tolist()}")
        if masks is not None:
            print(f"      model tokens {int(masks[i].sum())} of {len(masks[i])} (the rest: tool results, out of the loss)")
        if conversations is not None:
            for message in conversations[i]["messages"]:
                calls = [f"{c['function']['name']}({json.dumps(c['function']['arguments'])})"
                         for c in message.get("tool_calls", [])]
                print(f"      {message['role']}: {message.get('content')!r}" + (f" calls {', '.join(calls)}" if calls else ""))


def check_fixture(store):
    """The values written by the hidden C++ test case "store: python fixture"."""
    seen = set()
    for step, rank, g in step_groups(store):
        seen.add((step, rank))
        assert g.attrs["schema_version"] == 2
        assert g.attrs["step"] == step and g.attrs["rank"] == rank
        assert g.attrs["world_size"] == 2 and g.attrs["num_generations"] == 4
        assert [str(n) for n in g.attrs["reward_names"]] == ["length", "worker"]
        assert g.attrs["config_hash"] == "c0ffee0000000001"
        assert g.attrs["tokenizer"] == "byte"
        n = len(g["rewards"])
        assert n == 4, n
        np.testing.assert_array_equal(g["rewards"][()], np.arange(n, dtype=np.float32) + 100 * step + 10 * rank)
        completions = split(g["completion_ids"][()], g["completion_offsets"][()])
        for i, ids in enumerate(completions):
            np.testing.assert_array_equal(ids, 10 * i + np.arange(i + 1))
        t = int(g["completion_offsets"][-1])
        np.testing.assert_allclose(g["old_logps"][()], -np.arange(t, dtype=np.float32) / 10, rtol=0, atol=0)
        np.testing.assert_array_equal(g["entropies"][()], np.arange(t, dtype=np.float32) / 4)
        assert g["completion_mask"].dtype == np.uint8 and g["completion_mask"][()].all()
        assert g["rewards_per_func"].shape == (n, 2) and g["rewards_per_func"].dtype == np.float64
        assert np.isnan(g["rewards_per_func"][1, 1])
        assert ("ref_logps" in g) == (rank == 0)
        assert g["completion_ids"].compression == "gzip"
        if (step, rank) == (2, 0):
            assert g.attrs["entropy_threshold"] == 0.75
        else:
            assert "entropy_threshold" not in g.attrs
        if step == 2:  # tool-calling: who wrote each token, and the conversations as JSON strings
            assert g["tool_mask"].dtype == np.uint8
            np.testing.assert_array_equal(g["tool_mask"][()], (np.arange(t) % 2 == 0).astype(np.uint8))
            conversations = [json.loads(c) for c in g["conversations"].asstr()[()]]
            assert [c["tool_calls"] for c in conversations] == list(range(n)), conversations
            assert conversations[3]["messages"][1] == {"role": "tool", "name": "add", "content": "é"}
        else:
            assert "tool_mask" not in g and "conversations" not in g
    assert seen == {(1, 0), (1, 1), (2, 0), (2, 1)}, seen
    print("fixture ok:", sorted(seen))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--step", type=int)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--show", type=int, default=0, help="print the first K completions' token ids")
    parser.add_argument("--check-fixture", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        run(args)
    except StoreError as e:
        print(f"read_rollouts: error: {e}", file=sys.stderr)
        return 2


def run(args):
    with open_store(args.path) as store:
        if args.check_fixture:
            check_fixture(store)
            return
        for step, rank, g in step_groups(store):
            if (args.step is not None and step != args.step) or (args.rank is not None and rank != args.rank):
                continue
            summary(step, rank, g)
            if args.show:
                show(g, args.show)


if __name__ == "__main__":
    sys.exit(main())
