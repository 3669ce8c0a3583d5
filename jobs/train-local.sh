#!/usr/bin/env bash
# Runs `rayless train` on this workstation under mpirun: RANKS processes, each with THREADS intra-op
# threads pinned to its own cores. SIGTERM, SIGINT (Ctrl-C) or SIGUSR1 sent to this script make every
# rank checkpoint at the next step boundary and exit 3 (rerun with --resume auto to continue); a
# second SIGTERM or SIGINT stops at once, without a checkpoint. Plain mpirun cannot do this itself: it
# answers SIGTERM and SIGINT by killing the ranks within a second, and forwards only SIGUSR1/SIGUSR2.
set -euo pipefail
# first: a signal from now on is held, not fatal (rayless_trap_stop_signals below takes it over)
trap 'rayless_held+=" USR1"' USR1; trap 'rayless_held+=" TERM"' TERM; trap 'rayless_held+=" INT"' INT
root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
  cat <<EOF
usage: jobs/train-local.sh [options] [--] [rayless train arguments ...]

Runs RANKS copies of 'rayless train' with mpirun on this machine.

options:
  -n, --ranks N        MPI ranks (default 2)
  -t, --threads N      threads per rank: OMP_NUM_THREADS, distributed.threads_per_rank and cores
                       bound to each rank (default: cores / ranks, at least 1)
  -b, --bind MODE      core (default): each rank bound to its own THREADS cores (--map-by slot:PE=N
                       --bind-to core); socket: --map-by socket --bind-to socket; none: no binding.
                       When RANKS x THREADS exceeds the cores, binding is turned off (oversubscribed).
  -c, --config FILE    config TOML (default \$RAYLESS_CONFIG or configs/demo.toml)
  -o, --output DIR     run directory (default \$RAYLESS_OUTPUT or the config's train.output_dir)
  --resume auto|PATH   continue from the newest checkpoint in the run directory, or from PATH
  --dry-run            print the mpirun command and exit
  -h, --help           this text

environment: RAYLESS_BIN (default build/rayless), RAYLESS_CONFIG, RAYLESS_OUTPUT, MPIRUN (default mpirun),
  MPIRUN_ARGS (extra mpirun arguments, split on spaces).
Anything after the options (or after --) goes to 'rayless train', e.g. --set train.max_steps=100.

examples:
  jobs/train-local.sh                                   # demo config, 2 ranks
  jobs/train-local.sh -n 4 -t 8 -c my.toml -o runs/my  # 4 ranks x 8 threads on a 32-core machine
  kill -TERM <pid of train-local.sh>                    # checkpoint at the next step, exit 3 (or -USR1, Ctrl-C)
  jobs/train-local.sh -c my.toml -o runs/my --resume auto
exit codes: those of rayless train: 0 ok, 1 runtime failure, 2 bad input, 3 checkpointed on a signal.
EOF
}

ranks=2
threads=""
bind=core
config=${RAYLESS_CONFIG:-$root_dir/configs/demo.toml}
output=${RAYLESS_OUTPUT:-}
resume=""
dry_run=0
train_args=()
while [ $# -gt 0 ]; do
  case $1 in
    -n | --ranks) ranks=${2:?--ranks needs a value}; shift 2 ;;
    -t | --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    -b | --bind) bind=${2:?--bind needs a value}; shift 2 ;;
    -c | --config) config=${2:?--config needs a value}; shift 2 ;;
    -o | --output) output=${2:?--output needs a value}; shift 2 ;;
    --resume) resume=${2:?--resume needs a value}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; train_args+=("$@"); break ;;
    *) train_args+=("$1"); shift ;;
  esac
done

die() { printf 'train-local: error: %s\n' "$*" >&2; exit 2; }
[[ $ranks =~ ^[1-9][0-9]*$ ]] || die "--ranks must be a positive integer, got '$ranks'"
cores=$(nproc)
[ -n "$threads" ] || threads=$(( cores / ranks > 0 ? cores / ranks : 1 ))
[[ $threads =~ ^[1-9][0-9]*$ ]] || die "--threads must be a positive integer, got '$threads'"
case $bind in core | socket | none) ;; *) die "--bind must be core, socket or none, got '$bind'" ;; esac
bin=${RAYLESS_BIN:-$root_dir/build/rayless}
[ -x "$bin" ] || die "$bin is not executable (build first: tools/setup.sh; or set RAYLESS_BIN)"
[ -f "$config" ] || die "config $config not found"
mpirun=${MPIRUN:-mpirun}
command -v "$mpirun" >/dev/null || die "$mpirun not found (install openmpi-bin, or module load openmpi)"

mpi_args=(-np "$ranks")
if (( ranks * threads > cores )); then
  echo "train-local: $ranks ranks x $threads threads > $cores cores: oversubscribing without binding" >&2
  mpi_args+=(--oversubscribe --bind-to none)
else
  case $bind in
    core) mpi_args+=(--map-by "slot:PE=$threads" --bind-to core) ;;
    socket) mpi_args+=(--map-by socket --bind-to socket) ;;
    none) mpi_args+=(--bind-to none) ;;
  esac
fi
export OMP_NUM_THREADS=$threads
mpi_args+=(-x OMP_NUM_THREADS)
# Open MPI refuses to start as root unless both variables are set
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# shellcheck disable=SC2206  # a word list by design
mpi_args+=(${MPIRUN_ARGS:-})

# the threads each rank runs are the ones bound to it (and the ones said above)
cmd=("$mpirun" "${mpi_args[@]}" "$bin" train --config "$config" --set "distributed.threads_per_rank=$threads")
[ -z "$output" ] || cmd+=(--output "$output")
[ -z "$resume" ] || cmd+=(--resume "$resume")
cmd+=("${train_args[@]}")
printf 'train-local: running:'
printf ' %q' "${cmd[@]}"
printf '\n'
[ $dry_run = 1 ] && exit 0
# mpirun runs in its own session, so a terminal's Ctrl-C reaches only this script, and in the
# background, so the traps run while it works (jobs/stop_signals.sh: the first SIGTERM/SIGINT or any
# SIGUSR1 becomes SIGUSR1 to mpirun, which forwards it to every rank, once they take signals; a second
# SIGTERM/SIGINT goes to mpirun as it is, and mpirun kills the ranks).
set +e  # the exit status of mpirun is ours to pass on
rayless_say=train-local
rayless_launcher=mpirun
# shellcheck source=jobs/stop_signals.sh
source "$root_dir/jobs/stop_signals.sh"
rayless_trap_stop_signals
ready_dir=$(mktemp -d "${TMPDIR:-/tmp}/train-local.XXXXXX")  # the ranks run on this machine
rayless_run_step "$ready_dir/ranks-ready" setsid "${cmd[@]}"
rm -rf "$ready_dir"
exit "$rayless_step_rc"
