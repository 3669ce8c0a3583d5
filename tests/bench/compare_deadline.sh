#!/usr/bin/env bash
# tools/bench/compare.py's time limit on a run (--deadline-s, used on a lent GPU): a command still
# running at its deadline is stopped with everything it started (as mpirun's ranks would be), within
# seconds, and comes back as RunFailed naming the deadline; a command that fails comes back as
# RunFailed with its exit code and its log's tail.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
python3 - "$root/tools/bench" "$scratch" <<'PY'
import os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import compare
scratch = sys.argv[2]
marker = os.path.join(scratch, "child.pid")

# a parent that starts a child which ignores nothing and outlives it unless the group is stopped
script = f"sleep 300 & echo $! > {marker}; wait"
t0 = time.time()
try:
    compare.run_logged(["sh", "-c", script], os.path.join(scratch, "slow.log"), timeout=2)
    sys.exit("FAIL: a command past its deadline came back as finished")
except compare.RunFailed as e:
    assert "stopped at the deadline, after 2 s" in str(e), e
elapsed = time.time() - t0
assert elapsed < 15, f"stopping took {elapsed:.1f} s"
child = int(open(marker).read())
time.sleep(0.2)
state = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True).stdout.strip()
if state not in ("", "Z"):
    os.kill(child, 9)  # not left behind by the failing check
    sys.exit(f"FAIL: the command's child {child} is still running ({state})")

open(os.path.join(scratch, "fails.sh"), "w").write("echo the last words; exit 3\n")
try:
    compare.run_logged(["sh", os.path.join(scratch, "fails.sh")], os.path.join(scratch, "fails.log"))
    sys.exit("FAIL: a failing command came back as finished")
except compare.RunFailed as e:
    assert "command failed (3)" in str(e) and "the last words" in str(e), e
print(f"run_logged: stopped at its deadline with its child in {elapsed:.1f} s; a failure names its exit code and tail")
PY
