#!/usr/bin/env bash
# Draws the mean reward per step of a run: reads RUN_DIR/metrics.jsonl (one JSON object per line with
# numeric "step" and "reward"; a "reward_std" key, when present, is drawn as a band) and writes
# RUN_DIR/reward.png with gnuplot.
#   tools/plot_reward.sh RUN_DIR [OUTPUT.png]
# Exit codes: 0 written, 2 bad input (no such file, no usable line), 1 gnuplot failed.
set -euo pipefail
die() { printf 'plot_reward: error: %s\n' "$*" >&2; exit "${2:-2}"; }
[ $# -ge 1 ] && [ "$1" != -h ] && [ "$1" != --help ] || { echo "usage: tools/plot_reward.sh RUN_DIR [OUTPUT.png]"; [ $# -ge 1 ]; exit $?; }
run_dir=$1
metrics=$run_dir/metrics.jsonl
png=${2:-$run_dir/reward.png}
[ -f "$metrics" ] || die "$metrics not found"
command -v gnuplot >/dev/null || die "gnuplot not found (apt-get install gnuplot-nox)" 1

data=$(mktemp)
trap 'rm -f "$data" "$png.tmp"' EXIT
# Pull the numbers out of each line: the metrics are flat objects, so a key-value match suffices.
# A line without both numbers (a header, a truncated last line after a crash) is skipped.
awk '
  function number(key,   m) {
    if (match($0, "\"" key "\"[ \t]*:[ \t]*-?[0-9][0-9.eE+-]*")) {
      m = substr($0, RSTART, RLENGTH)
      sub(/^[^:]*:[ \t]*/, "", m)
      return m
    }
    return ""
  }
  {
    step = number("step"); reward = number("reward"); spread = number("reward_std")
    if (step == "" || reward == "") next
    print step, reward, (spread == "" ? 0 : spread)
  }
' "$metrics" >"$data"
points=$(wc -l <"$data")
[ "$points" -gt 0 ] || die "$metrics has no line with numeric \"step\" and \"reward\""
has_spread=$(awk '$3 != 0 { found = 1 } END { print found ? 1 : 0 }' "$data")

terminal="pngcairo size 900,540 enhanced font 'Sans,11'"
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || terminal="png size 900,540"
title=$(basename "$(cd "$run_dir" && pwd)")
{
  echo "set terminal $terminal"
  echo "set output '$png.tmp'"
  echo "set title 'mean reward per step: ${title//\'/}'"
  echo "set xlabel 'step'"
  echo "set ylabel 'reward'"
  echo "set grid"
  echo "set key bottom right"
  # one point: give gnuplot a range around it instead of an empty one
  [ "$points" -eq 1 ] && awk '{ print "set xrange [" $1 - 1 ":" $1 + 1 "]"; print "set yrange [" $2 - 1 ":" $2 + 1 "]" }' "$data"
  if [ "$has_spread" = 1 ]; then
    echo "plot '$data' using 1:(\$2-\$3):(\$2+\$3) with filledcurves lc rgb '#c6dbef' title '± std', \\"
    echo "     '' using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#08519c' title 'reward'"
  else
    echo "plot '$data' using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#08519c' title 'reward'"
  fi
} | gnuplot || die "gnuplot failed" 1
mv "$png.tmp" "$png"
echo "plot_reward: wrote $png ($points steps)"
