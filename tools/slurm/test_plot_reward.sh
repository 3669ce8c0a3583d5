#!/usr/bin/env bash
# ctest "slurm: plot_reward.sh draws metrics.jsonl": tools/plot_reward.sh turns a made-up
# metrics.jsonl (with a truncated last line, as after a crash) into a 900x540 PNG; different
# rewards give a different picture; with two reward functions' means and the completion length the
# picture grows a second panel (900x760) and changes when a function's curve changes; a file without
# rewards and a missing file exit 2.
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
png_size() { od -An -tu1 -j16 -N8 "$1" | awk '{ print ($1*16777216 + $2*65536 + $3*256 + $4) "x" ($5*16777216 + $6*65536 + $7*256 + $8) }'; }
mkdir -p "$work/c" "$work/d"
for s in 1 2 3 4 5 6; do
  printf '{"step": %d, "reward": %s, "rewards/length/mean": %s, "rewards/answer/mean": %s, "completions/mean_length": %s}\n' \
    "$s" "$(awk -v s=$s 'BEGIN { print -4 + s / 2 }')" "$(awk -v s=$s 'BEGIN { print -5 + s / 2 }')" "$(awk -v s=$s 'BEGIN { print s / 10 }')" $((20 - s))
done >"$work/c/metrics.jsonl"
sed 's/"rewards\/answer\/mean": [0-9.]*/"rewards\/answer\/mean": 0.9/' "$work/c/metrics.jsonl" >"$work/d/metrics.jsonl"
"$plot" "$work/c" && "$plot" "$work/d" || fail "plot_reward.sh failed on per-function metrics"
[ "$(png_size "$work/c/reward.png")" = 900x760 ] || fail "with completions/mean_length the picture should be 900x760, got $(png_size "$work/c/reward.png")"
cmp -s "$work/c/reward.png" "$work/d/reward.png" && fail "a different rewards/answer/mean curve drew the same picture"
echo "PASS: plot_reward.sh"
