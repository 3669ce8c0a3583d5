#!/usr/bin/env bash
# kill -9 at random moments (issue 17 §3): np 2, μ = 2, a checkpoint after every step. The whole job
# (mpirun and both ranks at once, as when a node is lost) gets SIGKILL KILLS times after pseudo-random
# delays (bash's RANDOM seeded with SEED: the same delays every time); after each kill, `latest` names a
# complete checkpoint that loads, the store holds no torn file, and no process is left; then
# `--resume auto` runs to the end and the final model.safetensors equals the uninterrupted run's.
# usage: kill_random.sh RAYLESS [STEPS] [SEED] [KILLS]   (its own uninterrupted run of STEPS steps)
# FAULTS_BREAK=stale-optimizer (shows the test can fail): before the last resume, the newest
# checkpoint's optimizer.pt is replaced by the previous checkpoint's (state that was not saved).
rayless=$1; steps=${2:-32}; seed=${3:-17}; kills=${4:-5}
source "$(dirname "$0")/lib.sh"
make_work kill-random
FAULTS_ARGS+=(--set "train.max_steps=$steps")
reference=$work/reference
ensure_reference
# the uninterrupted run's start-up time and step time: a kill's delay is drawn over the time the run
# it interrupts is expected to take (start-up + remaining steps), so kills land anywhere in it
read -r startup_s step_s < <(python3 - "$reference/metrics.jsonl" "$reference_s" <<'PY'
import json, sys
t = [json.loads(l)["step_time"] for l in open(sys.argv[1]) if l.strip()]
step = sum(t) / len(t)
print(f"{max(0.5, float(sys.argv[2]) - sum(t)):.3f} {step:.3f}")
PY
)
echo "start-up ~${startup_s} s, ~${step_s} s per step (checkpoint included)"
out=$work/run
RANDOM=$seed
t_start=$(now)
hit=0
for i in $(seq "$kills"); do
  resume=(); [ "$i" -gt 1 ] && resume=(--resume auto)
  done_steps=0
  [ -f "$out/checkpoints/latest" ] && done_steps=$(latest_name "$out" | sed -E 's/^step-0*([0-9]+).*/\1/')
  train_bg "$FAULTS_NP" "$out" "$work/run$i.log" "${resume[@]}"
  if [ "$i" -eq 1 ]; then
    # the first kill comes after the first checkpoint: before it, --resume auto refuses the run
    # directory (exit 2; faults-kill9-before-first-checkpoint covers that moment)
    for _ in $(seq 2400); do [ -f "$out/checkpoints/latest" ] || ! kill -0 "$job_pid" 2>/dev/null && break; sleep 0.05; done
    done_steps=$(latest_name "$out" | sed -E 's/^step-0*([0-9]+).*/\1/'); startup=0
  else
    startup=$startup_s
  fi
  # a delay of 5 % .. 60 % of the time this run should take
  expect_ms=$(awk -v a="$startup" -v s="$step_s" -v n=$((steps - done_steps)) 'BEGIN { printf "%d", (a + n * s) * 1000 }')
  delay_ms=$((expect_ms / 20 + (RANDOM * 32768 + RANDOM) % (expect_ms * 55 / 100 + 1)))
  delay=$(awk -v m="$delay_ms" 'BEGIN { printf "%.3f", m / 1000 }')
  sleep "$delay"
  if kill -0 "$job_pid" 2>/dev/null; then
    kill_job; rc=$job_rc
    hit=$((hit + 1))
    what="killed (SIGKILL to mpirun and both ranks) ${delay} s in, exit $rc"
  else
    wait "$job_pid"; rc=$?
    what="finished (exit $rc) before the kill at ${delay} s"
    [ $rc -eq 0 ] || { cat "$work/run$i.log"; fail "run $i exited $rc before it was killed"; }
  fi
  no_leftovers 5 || fail "processes left after kill $i"
  from=$(grep -ho "resumed from [^ ]*" "$work/run$i.log" | sed 's|.*/||')
  name=$(check_checkpoints "$out") || { echo "$name"; exit 1; }
  store=$(check_store "$out") || { echo "$store"; exit 1; }
  [ "$i" -eq 1 ] && from=${from:-fresh}
  echo "run $i (${from:-killed before its resume line}): $what; latest = $name; $store; no process left"
done
[ "$hit" -ge 1 ] || fail "no kill landed while the job ran"

if [ "${FAULTS_BREAK:-}" = stale-optimizer ]; then
  name=$(latest_name "$out")
  prev=$(ls -d "$out"/checkpoints/step-* | grep -v "/$name\$" | tail -1)
  echo "FAULTS_BREAK=stale-optimizer: $name/optimizer.pt <- $(basename "$prev")/optimizer.pt"
  cp "$prev/optimizer.pt" "$out/checkpoints/$name/optimizer.pt"
fi

train "$FAULTS_NP" "$out" --resume auto > "$work/final.log" 2>&1 || { cat "$work/final.log"; fail "the final --resume auto run"; }
grep -h "resumed from" "$work/final.log" | sed 's/^/    /'
grep -q "resumed from" "$work/final.log" || fail "the final run did not resume"
no_leftovers 5 || fail "processes left after the final run"
same_weights "$out" || exit 1
steps_once "$out" || exit 1
echo "PASS: $hit kill(s) at seeded random moments (seed $seed), then --resume auto: identical weights; $(elapsed "$t_start") s"
