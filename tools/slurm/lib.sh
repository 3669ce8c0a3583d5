# Shared helpers for the private Slurm scripts and tests (source it; it sets no shell options).

# Directory holding the private cluster's config, state and logs.
slurm_dir() { printf '%s\n' "${RAYLESS_SLURM_DIR:-/tmp/rayless-slurm}"; }

# True when the cluster in $1 answers and its node is idle (or already running jobs: mixed/allocated).
slurm_cluster_idle() {
  local dir=$1 state
  [ -f "$dir/etc/slurm.conf" ] || return 1
  state=$(SLURM_CONF=$dir/etc/slurm.conf timeout 10 sinfo -h -N -o '%T' 2>/dev/null | head -n 1) || return 1
  [[ $state == idle || $state == mixed || $state == allocated ]]
}

# Prints the tail of every daemon log of the cluster in $1 (for failures).
slurm_print_logs() {
  local dir=$1 f
  for f in "$dir"/log/*.log "$dir"/log/*.out "$dir"/munge/munged.log; do
    [ -s "$f" ] || continue
    printf '===== %s (last 40 lines) =====\n' "$f"
    tail -n 40 "$f"
  done
}

# Makes the private cluster usable from this shell, or exits 77 (ctest's skip code) when the test
# environment did not start it. Tests call this first.
slurm_require_cluster() {
  if [ "${RAYLESS_SLURM_UP:-0}" != 1 ]; then
    echo "SKIP: RAYLESS_SLURM_UP is not set (tools/test.sh starts the local Slurm and sets it)"
    exit 77
  fi
  local dir
  dir=$(slurm_dir)
  if [ ! -f "$dir/env" ]; then
    echo "FAIL: RAYLESS_SLURM_UP=1 but $dir/env is missing (did tools/slurm/start.sh run?)" >&2
    exit 1
  fi
  # shellcheck disable=SC1091
  source "$dir/env"
  export SLURM_CONF
  if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
}

# One field of `scontrol show job` (e.g. JobState, Restarts, ExitCode), empty when unknown.
slurm_job_field() {
  local job=$1 field=$2
  scontrol -o show job "$job" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$field=//p" | head -n 1
}

# Waits until job $1 reaches a final state (at most $2 seconds) and prints that state. `sbatch
# --wait` polls slowly and has returned 0 for a job killed by its time limit, so poll scontrol.
# REQUEUED / PENDING after a requeue are not final: the job will run again.
slurm_wait_job() {
  local job=$1 limit=$2 waited=0 state
  while :; do
    state=$(slurm_job_field "$job" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
        printf '%s\n' "$state"
        return 0
        ;;
    esac
    if ((waited >= limit)); then
      printf 'WAIT_TIMEOUT(%s)\n' "${state:-unknown}"
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

# Waits until job $1 is RUNNING (at most $2 seconds).
slurm_wait_running() {
  local job=$1 limit=$2 waited=0
  while [ "$(slurm_job_field "$job" JobState)" != RUNNING ]; do
    ((waited >= limit)) && return 1
    sleep 1
    waited=$((waited + 1))
  done
}

# Waits while job $1 runs (at most $3 seconds) until run directory $2 has logged a step; false if never.
slurm_wait_first_step() {
  local job=$1 run_dir=$2 limit=$3 i
  for ((i = 0; i < limit; i++)); do
    [ -s "$run_dir/metrics.jsonl" ] && return 0
    [ "$(slurm_job_field "$job" JobState)" = RUNNING ] || break
    sleep 1
  done
  [ -s "$run_dir/metrics.jsonl" ]
}

# Prints a job's record, its output files and the daemon logs (for failures).
slurm_report_job() {
  local job=$1 f
  shift
  # the lines that say why first: CI shows the start of a long failure report
  echo "===== why (srun, rayless and job-script lines of the outputs) ====="
  for f in "$@"; do
    [ -f "$f" ] && grep -H -E 'srun: error|slurmstepd|rayless(-job)?: (error|warning)|died of|exited with code|Segmentation|Abort' "$f" | tail -n 12
  done
  echo "===== scontrol show job $job ====="
  scontrol show job "$job" 2>&1 || true
  for f in "$@"; do
    [ -f "$f" ] || continue
    printf '===== %s =====\n' "$f"
    tail -n 60 "$f"
  done
  slurm_print_logs "$(slurm_dir)"
}

# The Slurm tests' failure exit: the message, then (when $job is set) the job's record, the job
# outputs in $work and the fake trainer's rank logs.
slurm_fail() {
  echo "FAIL: $*" >&2
  [ -n "${job:-}" ] && slurm_report_job "$job" "$work"/*.out "$work"/*/fake-rank-*.log >&2
  exit 1
}

# True when `rayless train` is implemented in binary $1 (the placeholder fails on --help).
rayless_trainer_available() {
  "$1" train --help >/dev/null 2>&1
}

# Continues when binary $1 has `rayless train`; otherwise says so and exits 77 (skipped), or 1
# when RAYLESS_REQUIRE_TRAINER=1.
rayless_require_trainer() {
  rayless_trainer_available "$1" && return 0
  echo "trainer not available: '$1 train --help' fails (rayless train is not built yet)"
  [ "${RAYLESS_REQUIRE_TRAINER:-0}" = 1 ] && exit 1
  exit 77
}

# Starts munged as the munge user with a private key and socket in $1/munge (which must exist, as
# must $1/log and $1/run); returns non-zero (after printing its logs) when it does not come up within
# 20 s. munged checks ownership and modes: its directory belongs to munge, and the socket directory
# must be 755 so that clients (root, here) can reach the socket.
slurm_start_munge() {
  local dir=$1 munge_dir=$1/munge munge_user=munge i
  id "$munge_user" >/dev/null 2>&1 || { echo "user munge does not exist (is the munge package installed?)" >&2; return 1; }
  chown "$munge_user:" "$munge_dir"
  chmod 755 "$munge_dir"
  runuser -u "$munge_user" -- mungekey --create --keyfile="$munge_dir/munge.key" >/dev/null 2>&1 \
    || { dd if=/dev/urandom of="$munge_dir/munge.key" bs=1024 count=1 status=none \
         && chown "$munge_user:" "$munge_dir/munge.key"; }
  chmod 600 "$munge_dir/munge.key"
  local socket=$munge_dir/munge.socket.2
  setsid runuser -u "$munge_user" -- munged --foreground --force \
    --socket="$socket" --key-file="$munge_dir/munge.key" --log-file="$munge_dir/munged.log" \
    --pid-file="$munge_dir/munged.pid" --seed-file="$munge_dir/munged.seed" \
    >"$dir/log/munged.out" 2>&1 </dev/null &
  echo $! >"$dir/run/munged.launcher.pid"
  for ((i = 0; i < 80; i++)); do
    [ -S "$socket" ] && munge -n -S "$socket" 2>/dev/null | unmunge -S "$socket" >/dev/null 2>&1 && return 0
    sleep 0.25
  done
  cat "$dir/log/munged.out" "$munge_dir/munged.log" 2>/dev/null >&2
  return 1
}

# The slurm.conf lines both private clusters share (plugins and scheduling for a container without
# cgroups; Debian's Open MPI under srun); each start script writes its own paths, hosts and nodes.
slurm_conf_common() {
  cat <<'CONF'
# no cgroups in a container: track processes through /proc, bind nothing
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Debian's Open MPI starts under srun only through PMIx
MpiDefault=pmix
MailProg=/bin/true
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
# schedule often: a requeued job should not sit pending for a minute
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=3600
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
CONF
}
