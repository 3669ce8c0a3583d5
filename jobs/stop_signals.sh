# Stop signals for the launchers (sourced by jobs/train-local.sh and slurm/common.sh; docs/hpc.md,
# "Stopping a run cleanly"). The script runs mpirun or srun in the background and takes the signals
# sent to it:
#  - SIGUSR1, or a first SIGTERM/SIGINT: a stop request. It becomes SIGUSR1 to the launcher, which
#    passes it to every rank (mpirun and srun answer SIGTERM by killing their ranks, so it is never
#    passed on): checkpoint at the next step boundary, exit 3. The request is held until the ranks
#    take signals (rank 0 creates $RAYLESS_READY_FILE): sent earlier, it would kill a rank that is
#    still loading its libraries.
#  - a second SIGTERM/SIGINT: SIGTERM to the launcher, which kills the ranks now (no checkpoint).
#  - SIGTERM/SIGINT while Slurm is ending the job (inside a job whose state is no longer RUNNING:
#    scancel JOB, the time limit, a preemption that requeues or cancels it): Slurm sends SIGTERM to
#    the ranks itself, and they checkpoint if its KillWait allows; nothing is forwarded, and
#    rayless_job_ending says so (the preemptible script does not requeue then).
#  - once the launcher has ended (or rayless_finishing is set): nothing to forward, the line says so.
# Before sourcing, set rayless_say (the prefix of every line) and rayless_launcher (mpirun, srun).
# A script that may be signalled before it sources this notes signals in rayless_held (one word per
# signal, e.g. trap 'rayless_held+=" USR1"' USR1); rayless_trap_stop_signals takes them over.
rayless_stop_requests=0
rayless_terminate_requests=0
rayless_forwarded=0
rayless_job_ending=""
rayless_step_pid=""
rayless_step_rc=""
rayless_ready_file=""
rayless_finishing=""

# The job's state as the Slurm controller has it now (RUNNING, COMPLETING, ...); empty outside a job.
rayless_job_state() {
  [ -n "${SLURM_JOB_ID:-}" ] || return 0
  scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p' | head -n 1
}

rayless_forward_stop() {
  rayless_forwarded=1
  echo "$rayless_say: $1: asking the ranks to checkpoint at their next step boundary (kill -USR1 $rayless_launcher $rayless_step_pid)"
  kill -USR1 "$rayless_step_pid" 2>/dev/null || true
}

rayless_on_signal() {
  local signal=SIG$1 now state
  now=$(date -Is)
  if [ -n "$rayless_finishing" ]; then
    echo "$rayless_say: $signal at $now: $rayless_finishing"
    return
  fi
  if [ "$1" != USR1 ]; then
    state=$(rayless_job_state)
    case $state in
      RUNNING | "") ;;  # a stop request: an operator's signal, Ctrl-C, a preemption's grace time
      *)
        rayless_job_ending=$state
        echo "$rayless_say: $signal at $now: Slurm is ending the job (JobState=$state): it signals the ranks" \
             "itself, and they checkpoint if its KillWait allows; no requeue"
        return
        ;;
    esac
  fi
  rayless_stop_requests=$((rayless_stop_requests + 1))
  [ "$1" = USR1 ] || rayless_terminate_requests=$((rayless_terminate_requests + 1))
  if [ "$rayless_terminate_requests" -ge 2 ] && [ -n "$rayless_step_pid" ]; then
    echo "$rayless_say: second $signal at $now: stopping the ranks now, without a checkpoint" \
         "(kill -TERM $rayless_launcher $rayless_step_pid, which ends them)"
    kill -TERM "$rayless_step_pid" 2>/dev/null || true
  elif [ "$rayless_forwarded" = 1 ]; then
    echo "$rayless_say: $signal at $now: the ranks were asked to checkpoint already"
  elif [ -z "$rayless_step_pid" ]; then
    echo "$rayless_say: $signal at $now, before training started: held"
  elif [ -e "$rayless_ready_file" ]; then
    rayless_forward_stop "$signal at $now"
  else
    echo "$rayless_say: $signal at $now: held until the ranks take signals (they are starting)"
  fi
}

rayless_trap_stop_signals() {
  trap 'rayless_on_signal USR1' USR1
  trap 'rayless_on_signal TERM' TERM
  trap 'rayless_on_signal INT' INT
  local held
  for held in ${rayless_held:-}; do rayless_on_signal "$held"; done
  rayless_held=""
}

# Runs "$@" (the launcher) in the background, so that this shell can take signals while it runs
# (bash runs a trap only between commands; `wait` is interruptible where a foreground command is
# not), with RAYLESS_READY_FILE=$1 in its environment, and sets rayless_step_rc to its exit code. A
# held request is forwarded once the ranks take signals.
rayless_run_step() {
  rayless_ready_file=$1
  shift
  if [ -n "$rayless_job_ending" ]; then
    rayless_step_rc=143
    rayless_finishing="the training step never started (Slurm is ending the job)"
    echo "$rayless_say: not starting the training step: Slurm is ending the job (exit $rayless_step_rc)"
    return
  fi
  rm -f "$rayless_ready_file"
  RAYLESS_READY_FILE=$rayless_ready_file "$@" &
  rayless_step_pid=$!
  local rc late_rc
  while :; do
    if [ "$rayless_stop_requests" -gt 0 ] && [ "$rayless_forwarded" = 0 ] && kill -0 "$rayless_step_pid" 2>/dev/null; then
      if [ -e "$rayless_ready_file" ]; then
        rayless_forward_stop "the ranks take signals now, $(date -Is): the request held"
      else
        sleep 0.2 &  # poll for the ranks; a trap interrupts this wait as well
        wait $! 2>/dev/null
        continue
      fi
    fi
    wait "$rayless_step_pid"
    rc=$?
    kill -0 "$rayless_step_pid" 2>/dev/null && continue
    if [ "$rc" -gt 128 ]; then  # it ended just after the interruption: collect its own status
      wait "$rayless_step_pid" 2>/dev/null
      late_rc=$?
      [ "$late_rc" -eq 127 ] || rc=$late_rc
    fi
    break
  done
  rm -f "$rayless_ready_file"
  rayless_step_rc=$rc
  rayless_finishing="the training step has ended (exit $rc): nothing to forward"
  echo "$rayless_say: training step exited with code $rc at $(date -Is)"
}
