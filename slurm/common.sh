# Shared by slurm/*.sbatch (sourced inside the job). Settles the paths and environment of a rayless
# job, builds the srun command line, and runs it while taking the job's signals; every script prints
# what it runs.
#
# Environment (all optional):
#   RAYLESS_HOME    the rayless checkout (default: the one holding the submitted script, whatever
#                   directory sbatch ran in)
#   RAYLESS_BIN     the executable (default: $RAYLESS_HOME/build/rayless)
#   RAYLESS_CONFIG  config TOML (default: $RAYLESS_HOME/configs/demo.toml); a relative path is relative
#                   to the directory sbatch ran in, and the paths inside it to the config's own directory
#   RAYLESS_OUTPUT  run directory (default: $RAYLESS_HOME/runs/<job name>-<job id>)
#   RAYLESS_ARGS    extra arguments for `rayless train`, split on spaces (e.g. "--set train.max_steps=50")
#   RAYLESS_SRUN_ARGS  extra arguments for srun (e.g. "--cpu-bind=cores")
# Arguments given to the sbatch script itself are appended to `rayless train` too.

rayless_job_setup() {
  RAYLESS_HOME=$(cd "$RAYLESS_HOME" && pwd)
  RAYLESS_BIN=${RAYLESS_BIN:-$RAYLESS_HOME/build/rayless}
  RAYLESS_CONFIG=${RAYLESS_CONFIG:-$RAYLESS_HOME/configs/demo.toml}
  RAYLESS_OUTPUT=${RAYLESS_OUTPUT:-$RAYLESS_HOME/runs/${SLURM_JOB_NAME:-rayless}-${SLURM_JOB_ID:-local}}
  if [ ! -x "$RAYLESS_BIN" ]; then
    echo "rayless-job: error: $RAYLESS_BIN is not executable (build first: tools/setup.sh; or set RAYLESS_BIN)" >&2
    exit 2
  fi
  if [ ! -f "$RAYLESS_CONFIG" ]; then
    echo "rayless-job: error: config $RAYLESS_CONFIG not found in $PWD (set RAYLESS_CONFIG)" >&2
    exit 2
  fi
  # Open MPI refuses root unless told; containers and test clusters often run jobs as root
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  # the threads per rank are rayless's to choose (distributed.threads_per_rank; rank 0's start line
  # prints them): only what Slurm granted is said here
  echo "rayless-job: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NODELIST:-?}: ${SLURM_NTASKS:-?} task(s)" \
       "${SLURM_CPUS_PER_TASK:+of $SLURM_CPUS_PER_TASK CPU(s) each }on ${SLURM_JOB_NUM_NODES:-?} node(s)," \
       "restart ${SLURM_RESTART_COUNT:-0}, checkout $RAYLESS_HOME, $(date -Is)"
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

# The signals a batch job takes (held until the ranks take them, a cancel told from a preemption):
# jobs/stop_signals.sh; rayless_run_step runs the srun step.
rayless_say=rayless-job
rayless_launcher=srun
# shellcheck source=jobs/stop_signals.sh
source "$RAYLESS_HOME/jobs/stop_signals.sh"

# The ranks' signal-ready file of this allocation, in the run directory (a file system every node sees).
rayless_ready_file_of_job() {
  printf '%s/logs/ranks-ready.%s.%s\n' "$RAYLESS_OUTPUT" "${SLURM_JOB_ID:-local}" "${SLURM_RESTART_COUNT:-0}"
}
