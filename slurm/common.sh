# Shared by slurm/*.sbatch (sourced inside the job). Settles the paths and environment of a rayless
# job and builds the srun command line; every script prints what it runs.
#
# Environment (all optional):
#   RAYLESS_HOME    the rayless checkout (default: the directory sbatch was run from)
#   RAYLESS_BIN     the executable (default: $RAYLESS_HOME/build/rayless)
#   RAYLESS_CONFIG  config TOML (default: $RAYLESS_HOME/configs/demo.toml)
#   RAYLESS_OUTPUT  run directory (default: $RAYLESS_HOME/runs/<job name>-<job id>)
#   RAYLESS_ARGS    extra arguments for `rayless train`, split on spaces (e.g. "--set train.max_steps=50")
#   RAYLESS_SRUN_ARGS  extra arguments for srun (e.g. "--cpu-bind=cores")
# Arguments given to the sbatch script itself are appended to `rayless train` too.

rayless_job_setup() {
  RAYLESS_HOME=${RAYLESS_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}
  RAYLESS_BIN=${RAYLESS_BIN:-$RAYLESS_HOME/build/rayless}
  RAYLESS_CONFIG=${RAYLESS_CONFIG:-$RAYLESS_HOME/configs/demo.toml}
  RAYLESS_OUTPUT=${RAYLESS_OUTPUT:-$RAYLESS_HOME/runs/${SLURM_JOB_NAME:-rayless}-${SLURM_JOB_ID:-local}}
  if [ ! -x "$RAYLESS_BIN" ]; then
    echo "rayless-job: error: $RAYLESS_BIN is not executable (build first: tools/setup.sh; or set RAYLESS_BIN)" >&2
    exit 2
  fi
  if [ ! -f "$RAYLESS_CONFIG" ]; then
    echo "rayless-job: error: config $RAYLESS_CONFIG not found (set RAYLESS_CONFIG)" >&2
    exit 2
  fi
  # Open MPI refuses root unless told; containers and test clusters often run jobs as root
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  # one intra-op thread pool per rank, sized to the cores Slurm gave each task
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
  echo "rayless-job: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-?} tasks," \
       "OMP_NUM_THREADS=$OMP_NUM_THREADS, restart ${SLURM_RESTART_COUNT:-0}, $(date -Is)"
}

# Fills the array train_cmd with: srun --mpi=pmix [srun args] rayless train --config --output [args].
rayless_train_command() {
  # shellcheck disable=SC2206  # RAYLESS_ARGS / RAYLESS_SRUN_ARGS are word lists by design
  local srun_extra=(${RAYLESS_SRUN_ARGS:-}) train_extra=(${RAYLESS_ARGS:-})
  train_cmd=(srun --mpi=pmix "${srun_extra[@]}" "$RAYLESS_BIN" train --config "$RAYLESS_CONFIG"
             --output "$RAYLESS_OUTPUT" "${train_extra[@]}" "$@")
}

rayless_print_command() {
  printf 'rayless-job: running:'
  printf ' %q' "$@"
  printf '\n'
}

# Stop signals in a batch job. srun answers SIGTERM by killing its tasks at once ("forcing job
# termination"), so a batch shell must never pass SIGTERM on: SIGUSR1, SIGTERM and SIGINT that reach
# this shell become SIGUSR1 to the srun step, which srun passes to every rank (checkpoint at the next
# step boundary, exit 3); a second SIGTERM/SIGINT becomes SIGTERM to srun (stop now). Call
# rayless_trap_stop_signals first thing, so a signal during set-up is remembered and forwarded once
# the step starts. rayless_stop_requests counts the requests.
rayless_stop_requests=0
rayless_terminate_requests=0
rayless_step_pid=""
rayless_forward_stop() {
  rayless_stop_requests=$((rayless_stop_requests + 1))
  [ "$1" = USR1 ] || rayless_terminate_requests=$((rayless_terminate_requests + 1))
  if [ -z "$rayless_step_pid" ]; then
    echo "rayless-job: SIG$1 at $(date -Is) before training started"
  elif [ "$rayless_terminate_requests" -le 1 ]; then
    echo "rayless-job: SIG$1 at $(date -Is): asking the ranks to checkpoint (kill -USR1 srun $rayless_step_pid)"
    kill -USR1 "$rayless_step_pid" 2>/dev/null || true
  else
    echo "rayless-job: second SIG$1 at $(date -Is): stopping now, without a checkpoint (kill -TERM srun)"
    kill -TERM "$rayless_step_pid" 2>/dev/null || true
  fi
}
rayless_trap_stop_signals() {
  trap 'rayless_forward_stop USR1' USR1
  trap 'rayless_forward_stop TERM' TERM
  trap 'rayless_forward_stop INT' INT
}

# Runs "$@" (the srun step) in the background, so that this shell can take signals while it runs
# (bash runs a trap only between commands; `wait` is interruptible where a foreground srun is not),
# and sets rayless_step_rc to its exit code. A request that came before the step started is
# forwarded as soon as it has.
rayless_run_step() {
  "$@" &
  rayless_step_pid=$!
  if [ "$rayless_stop_requests" -gt 0 ]; then
    echo "rayless-job: forwarding the earlier stop request to srun $rayless_step_pid"
    kill -USR1 "$rayless_step_pid" 2>/dev/null || true
  fi
  local rc late_rc
  while :; do
    wait "$rayless_step_pid"
    rc=$?
    kill -0 "$rayless_step_pid" 2>/dev/null && continue
    if [ "$rc" -gt 128 ]; then  # srun ended just after the interruption: collect its own status
      wait "$rayless_step_pid" 2>/dev/null
      late_rc=$?
      [ "$late_rc" -eq 127 ] || rc=$late_rc
    fi
    break
  done
  rayless_step_rc=$rc
  echo "rayless-job: training step exited with code $rc at $(date -Is)"
}
