#!/usr/bin/env bash
# Draws the mean reward per step of a run: reads RUN_DIR/metrics.jsonl (one JSON object per line with
# numeric "step" and "reward"; a "reward_std" key, when present, is drawn as a band; each reward
# function's "rewards/NAME/mean", when present, as its own line; "completions/mean_length", when
# present, in a second panel below) and writes RUN_DIR/reward.png with gnuplot.
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
# the reward functions that have a per-function mean, in order of first appearance
mapfile -t functions < <(grep -o '"rewards/[^"/]*/mean"' "$metrics" | sed 's|"rewards/\(.*\)/mean"|\1|' | awk '!seen[$0]++')
# Pull the numbers out of each line: the metrics are flat objects, so a key-value match suffices.
# A line without both "step" and "reward" (a header, a truncated last line after a crash) is skipped.
# Columns: step reward spread length function1 function2 ... (NaN where a line lacks one).
awk -v names="${functions[*]}" '
  function number(key,   m) {
    if (match($0, "\"" key "\"[ \t]*:[ \t]*-?[0-9][0-9.eE+-]*")) {
      m = substr($0, RSTART, RLENGTH)
      sub(/^[^:]*:[ \t]*/, "", m)
      return m
    }
    return ""
  }
  BEGIN { k = split(names, fn, " ") }
  {
    step = number("step"); reward = number("reward"); spread = number("reward_std")
    length_ = number("completions/mean_length")
    if (step == "" || reward == "") next
    line = step " " reward " " (spread == "" ? 0 : spread) " " (length_ == "" ? "NaN" : length_)
    for (i = 1; i <= k; i++) { v = number("rewards/" fn[i] "/mean"); line = line " " (v == "" ? "NaN" : v) }
    print line
  }
' "$metrics" >"$data"
points=$(wc -l <"$data")
[ "$points" -gt 0 ] || die "$metrics has no line with numeric \"step\" and \"reward\""
has_spread=$(awk '$3 != 0 { found = 1 } END { print found ? 1 : 0 }' "$data")
has_length=$(awk '$4 != "NaN" { found = 1 } END { print found ? 1 : 0 }' "$data")
# one function alone is the reward itself: draw per-function lines only when there are several
[ "${#functions[@]}" -ge 2 ] || functions=()

height=$([ "$has_length" = 1 ] && echo 760 || echo 540)
terminal="pngcairo size 900,$height enhanced font 'Sans,11'"
gnuplot -e "set terminal pngcairo" >/dev/null 2>&1 || terminal="png size 900,$height"
title=$(basename "$(cd "$run_dir" && pwd)")
colors=('#d94801' '#238b45' '#6a51a3' '#cb181d' '#737373' '#e7298a')
{
  echo "set terminal $terminal"
  echo "set output '$png.tmp'"
  echo "set datafile missing 'NaN'"
  [ "$has_length" = 1 ] && echo "set multiplot layout 2,1 margins 0.1,0.95,0.1,0.93 spacing 0,0.13"
  echo "set title 'mean reward per step: ${title//\'/}'"
  echo "set xlabel 'step'"
  echo "set ylabel 'reward'"
  echo "set grid"
  echo "set key bottom right"
  # one point: give gnuplot a range around it instead of an empty one
  [ "$points" -eq 1 ] && awk '{ print "set xrange [" $1 - 1 ":" $1 + 1 "]"; print "set yrange [" $2 - 1 ":" $2 + 1 "]" }' "$data"
  plots=()
  [ "$has_spread" = 1 ] && plots+=("'$data' using 1:(\$2-\$3):(\$2+\$3) with filledcurves lc rgb '#c6dbef' title '± std'")
  plots+=("'$data' using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#08519c' title 'reward'")
  for i in "${!functions[@]}"; do
    plots+=("'$data' using 1:$((i + 5)) with lines lw 1.5 lc rgb '${colors[i % ${#colors[@]}]}' title '${functions[i]//_/\\_}'")
  done
  (IFS=','; echo "plot ${plots[*]}")
  if [ "$has_length" = 1 ]; then
    echo "set title 'mean completion length'"
    echo "set ylabel 'tokens'"
    echo "set yrange [*:*]"
    echo "plot '$data' using 1:4 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#54278f' title 'completions/mean\\_length'"
    echo "unset multiplot"
  fi
} | gnuplot || die "gnuplot failed" 1
mv "$png.tmp" "$png"
echo "plot_reward: wrote $png ($points steps)"
