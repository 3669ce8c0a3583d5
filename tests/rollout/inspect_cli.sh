#!/bin/sh
# rayless inspect end to end: RAYLESS TEST_BINARY SCRATCH_DIR. Fails on the first unexpected result.
set -u
rayless=$1 test_binary=$2 dir=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot create $dir"
RAYLESS_FIXTURE_DIR="$dir/run/rollouts" "$test_binary" '[.python-fixture]' >/dev/null || fail "fixture writer"

"$rayless" inspect "$dir/run" > "$dir/summary.txt" || fail "summary exit $?"
grep -q '^step 1: 8 rollouts from 2 rank(s)' "$dir/summary.txt" || fail "summary step 1: $(cat "$dir/summary.txt")"
grep -q '^step 2: 8 rollouts .*entropy threshold 0.7500' "$dir/summary.txt" || fail "summary step 2: $(cat "$dir/summary.txt")"
# step 2 rank 0 rewards are 200..203 and rank 1's 210..213: mean 206.5
grep -q '^step 2: .*reward 206.5000' "$dir/summary.txt" || fail "reward mean: $(cat "$dir/summary.txt")"

"$rayless" inspect "$dir/run/rollouts/index.h5" --step 2 --rank 1 --show 4 > "$dir/show.txt" || fail "show exit $?"
grep -q '^#1  group .* reward 211.0000' "$dir/show.txt" || fail "show: $(cat "$dir/show.txt")"
grep -q 'completion:' "$dir/show.txt" || fail "show has no completion"
grep -q '\[\[' "$dir/show.txt" || fail "show marks no high-entropy token: $(cat "$dir/show.txt")"

"$rayless" inspect "$dir/run/rollouts/rank-00001.h5" --export jsonl > "$dir/rows.jsonl" || fail "export jsonl exit $?"
[ "$(wc -l < "$dir/rows.jsonl")" -eq 8 ] || fail "jsonl rows: $(wc -l < "$dir/rows.jsonl")"
/usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r['reward'] for r in rows if r['step'] == 1] == [110, 111, 112, 113], rows
assert rows[0]['rewards_per_func'].keys() == {'length', 'worker'}
assert rows[1]['rewards_per_func']['worker'] is None  # NaN -> null
assert rows[3]['completion_tokens'] == 4
" "$dir/rows.jsonl" || fail "jsonl content"

"$rayless" inspect "$dir/run" --export csv -o "$dir/rows.csv" > /dev/null || fail "export csv exit $?"
# decoded text may hold newlines inside quoted fields: count rows with a CSV parser
/usr/bin/python3 -c "
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1], newline='')))
assert len(rows) == 16, len(rows)
assert sorted(float(r['reward']) for r in rows if r['step'] == '1')[:4] == [100.0, 101.0, 102.0, 103.0]
" "$dir/rows.csv" || fail "csv rows"
head -1 "$dir/rows.csv" | grep -q '^step,rank,index,group,reward,advantage,reward_length,reward_worker,' || fail "csv header"

"$rayless" inspect "$dir/run" --histogram entropies --bins 5 > "$dir/hist.txt" || fail "histogram exit $?"
grep -q 'entropy of 40 completion tokens' "$dir/hist.txt" || fail "histogram: $(cat "$dir/hist.txt")"

# errors: exit 2 and exactly one line on stderr
expect_error() {
  what=$1; shift
  "$rayless" inspect "$@" > /dev/null 2> "$dir/err.txt"; rc=$?
  [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2: $(cat "$dir/err.txt")"
  [ "$(wc -l < "$dir/err.txt")" -eq 1 ] || fail "$what: stderr is not one line: $(cat "$dir/err.txt")"
  grep -q '^rayless: error: ' "$dir/err.txt" || fail "$what: $(cat "$dir/err.txt")"
}
expect_error "missing file" "$dir/nonexistent.h5"
echo "not hdf5" > "$dir/corrupt.h5"
expect_error "corrupt file" "$dir/corrupt.h5"
step_file="$dir/run/rollouts/rank-00000/step-00000001.h5"
head -c 2000 "$step_file" > "$dir/cut.h5" && mv "$dir/cut.h5" "$step_file"
expect_error "truncated step file" "$dir/run" --step 1
expect_error "bad export" "$dir/run" --export xml
echo "inspect ok"
