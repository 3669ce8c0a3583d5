#!/usr/bin/env bash
# Disk full (issue 17 §3), by write-failure injection (the io_faults shim, mode enospc: writes to the
# named files fail with ENOSPC). np 2, μ = 2, a checkpoint after every step, 8 steps:
#   1. the disk fills 1 MiB into rank 0's model.safetensors of the checkpoint after step 3 (rank 1
#      has written its part and waits)
#   2. (resumed) the disk is full for every rank's rollout store when generation 1 is written
#   3. (resumed) the disk fills 100 bytes into rank 0's metrics.jsonl line of step 5 (a torn line)
#   4. (resumed) the disk fills 64 KiB into rank 0's optimizer.pt of the checkpoint after step 5 (torch's
#      own zip writer: it used to end in std::terminate and a core, with no error line)
# Each time: exit 1, exactly one "rayless: error:" line, naming a path under checkpoints/, rollouts/
# or metrics.jsonl and saying "No space left on device";
# `latest` names the previous complete checkpoint, the store holds no torn file, no process is left.
# Then, with space back, `--resume auto` runs to the end (dropping the torn metrics line, with a
# warning): final weights equal the uninterrupted run's, every step in metrics.jsonl once.
# usage: disk_full.sh RAYLESS SHIM REFERENCE_DIR
# FAULTS_BREAK=ignore-errors (shows the test can fail): fault 1 uses shim mode drop (writes "succeed"
# without writing: what a writer that ignores errors produces).
rayless=$1; shim=$2; reference=$3
source "$(dirname "$0")/lib.sh"
make_work disk-full
ensure_reference
out=$work/run
flog=$work/faults.log
t_start=$(now)
n=0
mode1=enospc
[ "${FAULTS_BREAK:-}" = ignore-errors ] && mode1=drop

# full MODE RANK SUBSTR AFTER_BYTES WHERE WHAT
full() {
  local mode=$1 rank=$2 substr=$3 bytes=$4 where=$5 what=$6 rc t0 resume=() errors name store
  n=$((n + 1))
  [ -f "$out/checkpoints/latest" ] && resume=(--resume auto)
  t0=$(now)
  LD_PRELOAD=$shim RAYLESS_FAULT_MODE=$mode RAYLESS_FAULT_RANK=$rank RAYLESS_FAULT_PATH_SUBSTR=$substr \
    RAYLESS_FAULT_AFTER_BYTES=$bytes RAYLESS_FAULT_LOG=$flog train "$FAULTS_NP" "$out" "${resume[@]}" \
    > "$work/run$n.log" 2>&1
  rc=$?
  grep -q "$substr" "$flog" 2>/dev/null || { cat "$work/run$n.log"; fail "the fault never fired"; }
  echo "disk full $n: $what; job ended: exit $rc after $(elapsed "$t0") s"
  grep "$substr" "$flog" | sed "s|$work/||; s/^/    /"
  : > "$flog"
  no_leftovers 10 || fail "processes left"
  errors=$(grep "rayless: error:" "$work/run$n.log")
  echo "$errors" | sed "s|$work/||; s/^/    /"
  [ $rc -eq 1 ] || { cat "$work/run$n.log"; fail "exit $rc, expected 1"; }
  [ "$(echo "$errors" | grep -c .)" -eq 1 ] || { cat "$work/run$n.log"; fail "expected exactly one rayless: error: line"; }
  echo "$errors" | grep -q "$out/$where" || fail "the error does not name a path under $where"
  echo "$errors" | grep -qi "no space left on device" || fail "the error does not say why (No space left on device)"
  name=$(check_checkpoints "$out") || { echo "$name"; exit 1; }
  store=$(check_store "$out") || { echo "$store"; exit 1; }
  echo "    latest = $name (complete, loads); $store; no process left"
  [ "$name" = "$7" ] || fail "latest = $name, expected $7"
}

full "$mode1" 0 "/checkpoints/.tmp-step-00000003/" 1048576 checkpoints/ \
  "ENOSPC 1 MiB into rank 0's step-00000003/model.safetensors" step-00000002
[ ! -d "$out/checkpoints/step-00000003" ] || fail "a step-00000003 directory exists"
full enospc "" "/rollouts/" 0 rollouts/ "ENOSPC on every rank's rollout store (generation 1)" step-00000004
[ ! -f "$out/rollouts/rank-00000/step-00000001.h5" ] && [ ! -f "$out/rollouts/rank-00001/step-00000001.h5" ] ||
  echo "    (a step-00000001.h5 exists: whole, as checked)"
# metrics.jsonl (rank 0 writes it before the checkpoint of the same step): 100 bytes into step 5's
# line, so the line is also left torn; the next resume must drop it (with a warning)
full enospc 0 "/metrics.jsonl" 100 metrics.jsonl "ENOSPC 100 bytes into rank 0's metrics.jsonl line of step 5" step-00000004
python3 - "$out/metrics.jsonl" <<'PY' || fail "expected metrics.jsonl to end in a torn line (100 bytes of step 5's)"
import json, sys
text = open(sys.argv[1]).read()
last = text.split("\n")[-1]
assert not text.endswith("\n") and len(last) == 100, (len(last), last)
try:
    json.loads(last)
    sys.exit("the last line parses")
except ValueError:
    print("    metrics.jsonl ends in a torn line of 100 bytes: " + last[:40] + "...")
PY

full enospc 0 "/optimizer.pt" 65536 checkpoints/ "ENOSPC 64 KiB into rank 0's step-00000005/optimizer.pt" step-00000004
[ ! -d "$out/checkpoints/step-00000005" ] || fail "a step-00000005 directory exists"
# the first resume after the torn line (run 4) dropped it
grep -q "rayless: warning: .*metrics.jsonl:5: dropped a line that is not a whole metrics record" "$work/run4.log" ||
  { cat "$work/run4.log"; fail "the torn metrics.jsonl line was not reported as dropped"; }

t0=$(now)
train "$FAULTS_NP" "$out" --resume auto > "$work/final.log" 2>&1 || { cat "$work/final.log"; fail "--resume auto with space back"; }
grep -q "resumed from .*step-00000004" "$work/final.log" || { cat "$work/final.log"; fail "did not resume from step-00000004"; }
echo "space back: --resume auto from step-00000004 finished in $(elapsed "$t0") s"
no_leftovers 5 || fail "processes left after the final run"
same_weights "$out" || exit 1
steps_once "$out" || exit 1
echo "PASS: disk full in a checkpoint (our writer and torch's), in the store and in metrics.jsonl: exit 1, one line naming the path, previous state intact, identical weights after --resume auto; $(elapsed "$t_start") s"
