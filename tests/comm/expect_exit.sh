#!/usr/bin/env bash
# expect_exit.sh <expected exit code | nonzero> <pattern> <times> -- command...
# Runs the command; passes when its exit code is as expected and <pattern> (grep -E) occurs exactly
# <times> times in its combined output (0 = must not occur; +N = at least N times).
set -uo pipefail
expected=$1 pattern=$2 times=$3
shift 4
output=$("$@" 2>&1)
rc=$?
printf '%s\n' "$output"
count=$(printf '%s\n' "$output" | grep -cE -- "$pattern")
echo "expect_exit: exit code $rc, pattern \"$pattern\" seen $count times"
if [ "$expected" = nonzero ]; then
  [ "$rc" -ne 0 ] || { echo "expect_exit: FAIL: expected a non-zero exit code"; exit 1; }
else
  [ "$rc" -eq "$expected" ] || { echo "expect_exit: FAIL: expected exit code $expected"; exit 1; }
fi
if [[ $times == +* ]]; then
  [ "$count" -ge "${times#+}" ] || { echo "expect_exit: FAIL: expected the pattern at least ${times#+} times"; exit 1; }
else
  [ "$count" -eq "$times" ] || { echo "expect_exit: FAIL: expected the pattern $times times"; exit 1; }
fi
echo "expect_exit: ok"
