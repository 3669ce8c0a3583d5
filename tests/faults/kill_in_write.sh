#!/usr/bin/env bash
# kill -9 inside a checkpoint write and inside a rollout-store write (issue 17 §3), made reproducible
# by the io_faults shim (LD_PRELOAD, test-only variables): the rank raises SIGKILL after a fixed number
# of bytes of one named file, or right after one rename or deletion. One run directory goes through the faults
# below in turn (np 2, μ = 2, a checkpoint after every step, 8 steps = 2 generations); after each: the
# job is gone, `latest` names a complete checkpoint that loads and never a partial one, and every
# step file, rank file and index in the store is a whole HDF5 file. Then `--resume auto` runs to the
# end and the final model.safetensors equals the uninterrupted run's.
# usage: kill_in_write.sh RAYLESS SHIM REFERENCE_DIR
# FAULTS_BREAK=torn-latest (shows the test can fail): after the first kill, do what a non-atomic
# writer would have done: rename the half-written .tmp-step-00000002 to step-00000002 and point
# `latest` at it.
rayless=$1; shim=$2; reference=$3
source "$(dirname "$0")/lib.sh"
make_work kill-in-write
ensure_reference
out=$work/run
flog=$work/faults.log
t_start=$(now)
n=0

# faulted RANK ON SUBSTR AFTER_BYTES WHAT: one run with the shim armed; the fault must fire and the
# job must end non-zero with no process left; then the checkpoints and the store are checked
faulted() {
  local rank=$1 on=$2 substr=$3 bytes=$4 what=$5 before after rc t0 resume=()
  n=$((n + 1))
  [ -f "$out/checkpoints/latest" ] && resume=(--resume auto)
  before=$(cat "$flog" 2>/dev/null | wc -l)
  t0=$(now)
  LD_PRELOAD=$shim RAYLESS_FAULT_MODE=kill RAYLESS_FAULT_RANK=$rank RAYLESS_FAULT_ON=$on \
    RAYLESS_FAULT_PATH_SUBSTR=$substr RAYLESS_FAULT_AFTER_BYTES=$bytes RAYLESS_FAULT_LOG=$flog \
    train "$FAULTS_NP" "$out" "${resume[@]}" > "$work/run$n.log" 2>&1
  rc=$?
  after=$(cat "$flog" 2>/dev/null | wc -l)
  [ "$after" -gt "$before" ] || { cat "$work/run$n.log"; fail "fault $n ($what) never fired"; }
  [ $rc -ne 0 ] || fail "fault $n: the job exited 0"
  no_leftovers 10 || fail "fault $n: processes left"
  echo "fault $n: $what: $(tail -1 "$flog" | sed "s|$work/||")"
  echo "    job ended: exit $rc after $(elapsed "$t0") s; $(grep -ho 'resumed from [^ ]*' "$work/run$n.log" | sed "s|$work/||" || echo 'fresh start')"
}
check_after() {
  local name store
  name=$(check_checkpoints "$out") || { echo "$name"; exit 1; }
  store=$(check_store "$out") || { echo "$store"; exit 1; }
  echo "    latest = $name (complete, loads); $store; no process left"
  [ -z "${1:-}" ] || [ "$name" = "$1" ] || fail "latest = $name, expected $1"
}

# 1. rank 0 dies 1 MiB into model.safetensors of the checkpoint after step 2
faulted 0 write "/checkpoints/.tmp-step-00000002/.model.safetensors.tmp" 1048576 \
  "SIGKILL inside the write of step-00000002/model.safetensors"
if [ "${FAULTS_BREAK:-}" = torn-latest ]; then
  echo "FAULTS_BREAK=torn-latest: .tmp-step-00000002 -> step-00000002, latest -> step-00000002"
  mv "$out/checkpoints/.tmp-step-00000002" "$out/checkpoints/step-00000002"
  echo step-00000002 > "$out/checkpoints/latest"
fi
check_after step-00000001
[ -d "$out/checkpoints/.tmp-step-00000002" ] && echo "    the partial checkpoint is .tmp-step-00000002 (not a step-* name)"

# 2. rank 0 dies right after renaming .tmp-step-00000003 to step-00000003, before `latest` moves
faulted 0 rename "/checkpoints/step-00000003" 0 "SIGKILL after the rename to step-00000003, before latest moves"
check_after step-00000002

# 3. rank 1 dies 2 KiB into its step file of generation 1 (the resumed run redoes step 3 first)
faulted 1 write "/rollouts/rank-00001/.step-00000001.h5.tmp" 2048 "SIGKILL inside rank 1's write of step-00000001.h5"
grep -q "resumed from .*step-00000002" "$work/run$n.log" || fail "run 3 did not resume from step-00000002"
check_after step-00000004

# 4. rank 0 dies inside the rebuild of index.h5 after generation 1
faulted 0 write "/rollouts/.index.h5.tmp" 1024 "SIGKILL inside rank 0's rewrite of rollouts/index.h5"
check_after step-00000004

# 5. rank 1 dies inside its rank file (links) after generation 1
faulted 1 write "/rollouts/.rank-00001.h5.tmp" 1024 "SIGKILL inside rank 1's rewrite of rollouts/rank-00001.h5"
check_after step-00000004

# 6. rank 0 dies 64 KiB into optimizer.pt of the checkpoint after step 6
faulted 0 write "/checkpoints/.tmp-step-00000006/optimizer.pt" 65536 "SIGKILL inside the write of step-00000006/optimizer.pt"
check_after step-00000005

# 7. rank 0 dies inside the write of `latest` itself (the resumed run's first: naming step-00000006,
#    already renamed into place)
faulted 0 write "/checkpoints/.latest.tmp" 0 "SIGKILL inside the write of checkpoints/latest"
check_after step-00000005

# 8. rank 0 dies while pruning (checkpoint.keep_last = 3), once step-00000006 is in place and named
#    by latest: right after step-00000003/trainer_state.json is deleted. Pruning renames the directory
#    to .tmp-removing-step-00000003 first, so no half-deleted step-* is left (check_checkpoints fails
#    on one); the next save clears the .tmp- leftover.
faulted 0 unlink "/checkpoints/.tmp-removing-step-00000003/trainer_state.json" 0 "SIGKILL while pruning step-00000003, after its trainer_state.json"
check_after step-00000006
[ ! -e "$out/checkpoints/step-00000003" ] || fail "step-00000003 still exists after its deletion began"

train "$FAULTS_NP" "$out" --resume auto > "$work/final.log" 2>&1 || { cat "$work/final.log"; fail "the final --resume auto run"; }
grep -q "resumed from .*step-00000006" "$work/final.log" || { cat "$work/final.log"; fail "the final run did not resume from step-00000006"; }
no_leftovers 5 || fail "processes left after the final run"
check_after step-00000008
leftovers=$(ls -A "$out/checkpoints" | grep '^\.' | tr '\n' ' ')
[ -z "$leftovers" ] || fail "leftovers of the kills in checkpoints/ after a clean save: $leftovers"
echo "    checkpoints/ holds no leftover .tmp-* or .latest.tmp.* (cleared by the next save)"
leftovers=$(find "$out/rollouts" -name '.*.tmp.*' | sed "s|$work/||" | tr '\n' ' ')
[ -z "$leftovers" ] || fail "leftovers of the kills in the store after later generations were written: $leftovers"
echo "    the store holds no leftover .*.tmp.* (each rank clears its own when it next writes)"
same_weights "$out" || exit 1
steps_once "$out" || exit 1
echo "PASS: $n kills inside checkpoint and store writes; latest always complete, no torn step file, identical weights; $(elapsed "$t_start") s"
