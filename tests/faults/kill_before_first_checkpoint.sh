#!/usr/bin/env bash
# kill -9 before the first checkpoint exists (issue 17 §3: "after any number of kills, --resume auto
# completes"): (a) rank 0 dies inside the first generation's step file, (b) rank 0 dies inside the
# first checkpoint's model.safetensors (metrics.jsonl and the store already hold step 1). Each time
# `--resume auto` must run to the end with the uninterrupted run's final weights.
# usage: kill_before_first_checkpoint.sh RAYLESS SHIM REFERENCE_DIR
rayless=$1; shim=$2; reference=$3
source "$(dirname "$0")/lib.sh"
make_work kill-before-first
ensure_reference
flog=$work/faults.log
t_start=$(now)
status=0

case_() {
  local label=$1 substr=$2 bytes=$3 out=$work/$1 rc
  LD_PRELOAD=$shim RAYLESS_FAULT_MODE=kill RAYLESS_FAULT_RANK=0 RAYLESS_FAULT_PATH_SUBSTR=$substr \
    RAYLESS_FAULT_AFTER_BYTES=$bytes RAYLESS_FAULT_LOG=$flog train "$FAULTS_NP" "$out" > "$work/$label-1.log" 2>&1
  rc=$?
  grep -q "$substr" "$flog" 2>/dev/null || { cat "$work/$label-1.log"; fail "($label) the fault never fired"; }
  [ $rc -ne 0 ] || fail "($label) the job exited 0"
  no_leftovers 10 || fail "($label) processes left"
  echo "($label) killed: $(grep "$substr" "$flog" | tail -1 | sed "s|$work/||"); exit $rc; the run directory holds: $(cd "$out" && ls -A | tr '\n' ' ')"
  [ ! -e "$out/checkpoints/latest" ] || fail "($label) a checkpoint exists: not the case under test"
  train "$FAULTS_NP" "$out" --resume auto > "$work/$label-2.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: ($label) --resume auto after a kill before the first checkpoint exited $rc:"
    grep "rayless: error" "$work/$label-2.log" | head -2 | sed "s|$work/||; s/^/    /"
    status=1
    return
  fi
  no_leftovers 5 || fail "($label) processes left"
  same_weights "$out" || { status=1; return; }
  steps_once "$out" || { status=1; return; }
  echo "PASS: ($label) --resume auto completed with identical weights"
}

case_ store "/rollouts/rank-00000/.step-00000000.h5.tmp" 2048
case_ checkpoint "/checkpoints/.tmp-step-00000001/.model.safetensors.tmp" 1048576
[ $status -eq 0 ] || exit 1
echo "PASS: kills before the first checkpoint; --resume auto completes; $(elapsed "$t_start") s"
