#!/usr/bin/env bash
# Prompt datasets read through a byte-offset index (issue 51 §1), end to end on 2 ranks:
#  1. the first start builds the index beside the data and checks every row; the second reuses both
#     (the start-up line says which)
#  2. the file edited: a row appended is indexed (the index rebuilt, the rows checked again); a bad row
#     appended is exit 2 naming file:line at start, nothing written
#  3. where the index cannot go beside the data (.rayless-index taken by a file; a read-only directory
#     on a cluster), it goes to the run directory's data-index/
#  4. a directory of *.jsonl shards is one dataset; a bad row in a shard names that shard's line
# usage: dataset_index.sh RAYLESS
set -uo pipefail
rayless=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/rayless-dataset-index.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$src"
fail() { echo "FAIL: $*"; exit 1; }
train() {  # train OUTPUT DATA [--set ...]
  local out=$1 data=$2; shift 2
  mpirun -np 2 --oversubscribe --bind-to none "$rayless" train --config configs/ci-small.toml --output "$out" \
    --set data.path="\"$data\"" --set train.max_steps=1 --set grpo.num_iterations=1 --set grpo.steps_per_generation=1 \
    --set log.console=false "$@"
}

# 1. built, then reused
mkdir -p "$work/data"
cp data/demo/prompts.jsonl "$work/data/p.jsonl"
rows=$(grep -c . "$work/data/p.jsonl")
train "$work/run1" "$work/data/p.jsonl" > "$work/run1.log" 2>&1 || { cat "$work/run1.log"; fail "first start"; }
grep -q "$rows prompts (read and checked in [0-9.]* s; index built in $work/data/.rayless-index)" "$work/run1.log" \
  || { cat "$work/run1.log"; fail "the first start should build the index beside the data"; }
[ -s "$work/data/.rayless-index/p.jsonl.idx" ] || fail "no index file beside the data"
train "$work/run2" "$work/data/p.jsonl" > "$work/run2.log" 2>&1 || { cat "$work/run2.log"; fail "second start"; }
grep -q "$rows prompts (opened in [0-9.]* s; index reused from $work/data/.rayless-index; rows checked by an earlier start with these files and settings)" "$work/run2.log" \
  || { cat "$work/run2.log"; fail "the second start should reuse the index and the check"; }
echo "PASS: the index is built at the first start, reused (with the rows' check) at the second"

# 2. edits
echo '{"prompt": "One more: 2+2?", "answer": "4"}' >> "$work/data/p.jsonl"
train "$work/run3" "$work/data/p.jsonl" > "$work/run3.log" 2>&1 || { cat "$work/run3.log"; fail "start after an appended row"; }
grep -q "$((rows + 1)) prompts (read and checked in [0-9.]* s; index built in $work/data/.rayless-index)" "$work/run3.log" \
  || { cat "$work/run3.log"; fail "an appended row: the index should be rebuilt and the rows checked"; }
echo '{"prompt": 12}' >> "$work/data/p.jsonl"
train "$work/run4" "$work/data/p.jsonl" > "$work/run4.log" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c 'rayless: error:' "$work/run4.log")" -eq 1 ] || { cat "$work/run4.log"; fail "a bad row appended: exit 2 and one line, got $rc"; }
grep -q "rayless: error: $work/data/p.jsonl:$((rows + 2)): field \"prompt\" must be a string" "$work/run4.log" \
  || { cat "$work/run4.log"; fail "the bad row's file:line"; }
for written in metrics.jsonl rollouts checkpoints; do [ ! -e "$work/run4/$written" ] || fail "$written written before the check"; done
echo "PASS: edits rebuild the index; a bad row appended is $(grep 'rayless: error:' "$work/run4.log" | sed "s|$work/||g" | cut -c1-90)"

# 3. nowhere beside the data: the run directory
mkdir -p "$work/ro"
cp data/demo/prompts.jsonl "$work/ro/p.jsonl"
echo "a file where the index directory would go" > "$work/ro/.rayless-index"
train "$work/run5" "$work/ro/p.jsonl" > "$work/run5.log" 2>&1 || { cat "$work/run5.log"; fail "start with the index in the run directory"; }
grep -q "$rows prompts (read and checked in [0-9.]* s; index built in $work/run5/data-index)" "$work/run5.log" \
  || { cat "$work/run5.log"; fail "the index should go to the run directory's data-index/"; }
echo "PASS: where the data's directory takes no index, the run directory's data-index/ does"

# 4. a directory of shards
mkdir -p "$work/shards"
head -n 20 data/demo/prompts.jsonl > "$work/shards/part-0.jsonl"
tail -n +21 data/demo/prompts.jsonl > "$work/shards/part-1.jsonl"
train "$work/run6" "$work/shards" > "$work/run6.log" 2>&1 || { cat "$work/run6.log"; fail "a directory of shards"; }
grep -q "$rows prompts (read and checked in [0-9.]* s; 2 shard indexes built in $work/shards/.rayless-index)" "$work/run6.log" \
  || { cat "$work/run6.log"; fail "a directory of two shards is one dataset of $rows rows"; }
echo 'not json' >> "$work/shards/part-0.jsonl"
train "$work/run7" "$work/shards" > "$work/run7.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "rayless: error: $work/shards/part-0.jsonl:21: not valid JSON" "$work/run7.log" \
  || { cat "$work/run7.log"; fail "a bad row in a shard: exit 2 naming part-0.jsonl:21, got $rc"; }
echo "PASS: a directory of shards trains as one dataset; a bad row names its shard and line"
