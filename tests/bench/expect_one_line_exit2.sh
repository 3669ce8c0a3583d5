#!/usr/bin/env bash
# expect_one_line_exit2.sh PATTERN COMMAND...: COMMAND must exit 2 with one line on stderr matching PATTERN.
pattern=$1; shift
err=$("$@" 2>&1 >/dev/null); rc=$?
echo "rc $rc: $err"
[ "$rc" -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && grep -q -- "$pattern" <<< "$err"
