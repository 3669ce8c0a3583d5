#!/usr/bin/env bash
# ctest "slurm: plot_reward.sh draws metrics.jsonl": tools/plot_reward.sh turns a made-up
# metrics.jsonl (with a truncated last line, as after a crash) into a 900x540 PNG; different
# rewards give a different picture; a file without rewards and a missing file exit 2.
#   test_plot_reward.sh WORK_DIR
set -uo pipefail
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${1:?usage: test_plot_reward.sh WORK_DIR}
plot=$root_dir/tools/plot_reward.sh
rm -rf "$work" && mkdir -p "$work/a" "$work/b" "$work/none"
fail() { echo "FAIL: $*" >&2; exit 1; }

for s in 1 2 3 4 5 6 7 8; do
  printf '{"step": %d, "loss": 0.25, "reward": %s, "reward_std": 0.5}\n' "$s" "$(awk -v s=$s 'BEGIN { print -8 + s / 2 }')"
done >"$work/a/metrics.jsonl"
printf '{"step": 9, "rew' >>"$work/a/metrics.jsonl"
for s in 1 2 3 4 5 6 7 8; do
  printf '{"step": %d, "reward": %s}\n' "$s" "$(awk -v s=$s 'BEGIN { print -s }')"
done >"$work/b/metrics.jsonl"
echo '{"step": 1, "loss": 0.5}' >"$work/none/metrics.jsonl"

"$plot" "$work/a" || fail "plot_reward.sh exited $? on a good file"
"$plot" "$work/b" || fail "plot_reward.sh exited $? on a good file"
png=$work/a/reward.png
[ -s "$png" ] || fail "no $png"
# PNG signature, then the IHDR chunk: width and height as big-endian 32-bit numbers
[ "$(od -An -tx1 -N8 "$png" | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$png is not a PNG"
size=$(od -An -tu1 -j16 -N8 "$png" | awk '{ print ($1*16777216 + $2*65536 + $3*256 + $4) "x" ($5*16777216 + $6*65536 + $7*256 + $8) }')
[ "$size" = 900x540 ] || fail "$png is $size, expected 900x540"
cmp -s "$png" "$work/b/reward.png" && fail "two different reward curves drew the same picture"
grep -q '(8 steps)' <("$plot" "$work/a") || fail "the truncated last line was not skipped"

"$plot" "$work/none" 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "a file without rewards exited $rc, expected 2"
"$plot" "$work/missing" 2>/dev/null; rc=$?
[ $rc -eq 2 ] || fail "a missing run directory exited $rc, expected 2"
echo "PASS: plot_reward.sh"
