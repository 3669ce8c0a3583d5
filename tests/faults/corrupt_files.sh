#!/usr/bin/env bash
# Damaged files at resume (issue 17 §3, last two items). Each case starts from a copy of the
# uninterrupted run (np 2, μ = 2, a checkpoint after every step, keep_last = 3: step-6, -7, -8) and
# damages files the way a lost node, a bad disk or a careless copy does:
#   1. model.safetensors of the newest checkpoint (step-8) truncated to half
#   2. trainer_state.json of step-8 replaced by garbage
#   3. optimizer.pt of step-8 one byte short (only manifest.json's sizes can tell)
#   For 1-3, `--resume auto` names the bad file in a warning, falls back to step-7, trains step 8
#   again and ends with weights identical to the uninterrupted run's.
#   4. `--resume PATH` naming the damaged step-8: exit 2, one error line naming the file; the run
#      directory is untouched.
#   5. every checkpoint damaged: `--resume auto` exits 2 naming latest's file; nothing touched.
#   6-7. a stored generation damaged at a mid-cycle resume (latest -> step-6, the middle of generation
#      1): rank 1's step file truncated, then rank 0's with garbage bytes inside its data: exit 2, one
#      error line naming the step file.
# usage: corrupt_files.sh RAYLESS REFERENCE_DIR
# Seen to fail: with checkpoint_problem() (src/trainer/checkpoint.cpp) made to accept everything,
# case 1 fails ("no warning naming ..."), as do 2-5 (docs/reliability.md).
rayless=$1; reference=$2
source "$(dirname "$0")/lib.sh"
make_work corrupt
ensure_reference
t_start=$(now)
n=0

fresh_copy() {
  out=$work/run
  rm -rf "$out"
  cp -a "$reference" "$out"
  [ "$(latest_name "$out")" = step-00000008 ] || fail "the reference run's latest is not step-00000008"
}
# a fingerprint of everything under the run directory (names, sizes, contents)
fingerprint() { (cd "$1" && find . -type f ! -path './logs/*' -print0 | sort -z | xargs -0 md5sum | md5sum); }

# fallback WHAT FILE: --resume auto falls back to step-7 with a warning naming FILE, identical result
fallback() {
  local what=$1 file=$2 t0 rc
  n=$((n + 1))
  t0=$(now)
  train "$FAULTS_NP" "$out" --resume auto > "$work/run$n.log" 2>&1
  rc=$?
  echo "case $n: $what: exit $rc after $(elapsed "$t0") s"
  grep "rayless: warning: --resume auto" "$work/run$n.log" | sed "s|$work/||; s/^/    /"
  [ $rc -eq 0 ] || { cat "$work/run$n.log"; fail "case $n: exit $rc, expected 0 (fall back to step-00000007)"; }
  grep -q "rayless: warning: --resume auto: .*checkpoints/latest names step-00000008, which is damaged (.*$file" "$work/run$n.log" ||
    { cat "$work/run$n.log"; fail "case $n: no warning naming $file"; }
  grep -q "falling back to step-00000007" "$work/run$n.log" || fail "case $n: the warning does not name step-00000007"
  grep -q "resumed from .*step-00000007" "$work/run$n.log" || { cat "$work/run$n.log"; fail "case $n: did not resume from step-00000007"; }
  no_leftovers 5 || fail "case $n: processes left"
  name=$(check_checkpoints "$out") || { echo "$name"; exit 1; }
  same_weights "$out" | sed 's/^/    /'
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
  steps_once "$out" | sed 's/^/    /'
}

# refused WHAT NEEDLE [ARGS...]: exit 2, exactly one error line containing NEEDLE, nothing changed
refused() {
  local what=$1 needle=$2 before rc errors; shift 2
  n=$((n + 1))
  before=$(fingerprint "$out")
  train "$FAULTS_NP" "$out" "$@" > "$work/run$n.log" 2>&1
  rc=$?
  errors=$(grep "rayless: error:" "$work/run$n.log")
  echo "case $n: $what: exit $rc"
  echo "$errors" | sed "s|$work/||; s/^/    /"
  [ $rc -eq 2 ] || { cat "$work/run$n.log"; fail "case $n: exit $rc, expected 2"; }
  [ "$(echo "$errors" | grep -c .)" -eq 1 ] || { cat "$work/run$n.log"; fail "case $n: expected exactly one rayless: error: line"; }
  echo "$errors" | grep -qF "$needle" || fail "case $n: the error does not name $needle"
  no_leftovers 5 || fail "case $n: processes left"
  [ "$(fingerprint "$out")" = "$before" ] || fail "case $n: the run directory changed"
  echo "    run directory unchanged (md5 of every file outside logs/)"
}

ckpt=checkpoints/step-00000008

# a copy of the run as if it had been killed right after the checkpoint of step 6
interrupted_at_step_6() {
  fresh_copy
  echo step-00000006 > "$out/checkpoints/latest"
  rm -rf "$out/checkpoints/step-00000007" "$out/checkpoints/step-00000008"
  python3 -c "
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip() and json.loads(l)['step'] <= 6]
open(sys.argv[1], 'w').writelines(lines)
" "$out/metrics.jsonl"
}

# 1. truncated model
fresh_copy
size=$(stat -c %s "$out/$ckpt/model.safetensors")
truncate -s $((size / 2)) "$out/$ckpt/model.safetensors"
fallback "step-8/model.safetensors truncated to $((size / 2)) of $size bytes" "$ckpt/model.safetensors"

# 2. garbage trainer_state.json
fresh_copy
printf 'garbage \x00\x01 {' > "$out/$ckpt/trainer_state.json"
fallback "step-8/trainer_state.json replaced by garbage" "$ckpt/trainer_state.json: not valid JSON"

# 3. optimizer.pt one byte short
fresh_copy
size=$(stat -c %s "$out/$ckpt/optimizer.pt")
truncate -s $((size - 1)) "$out/$ckpt/optimizer.pt"
fallback "step-8/optimizer.pt one byte short" "$ckpt/optimizer.pt: $((size - 1)) bytes, but the checkpoint wrote $size"

# 4. --resume PATH naming the damaged checkpoint: no fallback
fresh_copy
truncate -s 1000 "$out/$ckpt/model.safetensors"
refused "--resume $ckpt (model.safetensors truncated to 1000 bytes)" "$ckpt/model.safetensors" --resume "$out/$ckpt"

# 5. every checkpoint damaged
for s in 6 7 8; do truncate -s 1000 "$out/checkpoints/step-0000000$s/model.safetensors"; done
refused "step-6, -7 and -8 all damaged" "no older checkpoint under" --resume auto

# 6. mid-cycle resume (step-6: generation 1 is steps 5-8) with rank 1's stored generation truncated
interrupted_at_step_6
step_file=rollouts/rank-00001/step-00000001.h5
size=$(stat -c %s "$out/$step_file")
truncate -s $((size / 2)) "$out/$step_file"
refused "mid-cycle resume, $step_file truncated to half" "$step_file" --resume auto

# 7. the same with garbage written over the middle of rank 0's step file (its size unchanged)
interrupted_at_step_6
step_file=rollouts/rank-00000/step-00000001.h5
size=$(stat -c %s "$out/$step_file")
python3 -c "
import sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, 'r+b') as f:
    f.seek(size // 2)
    f.write(bytes((i * 37 + 11) % 256 for i in range(256)))
" "$out/$step_file" "$size"
refused "mid-cycle resume, 256 garbage bytes in the middle of $step_file" "$step_file" --resume auto

echo "PASS: $n cases of damaged checkpoints and stored generations; $(elapsed "$t_start") s"
